/* CRC-32 of event payloads for the C engine (agentlog.engine.cengine).
 *
 * The CRC that zlib.crc32 computes (IEEE 802.3, reflected polynomial
 * 0xEDB88320, initial value and final xor 0xFFFFFFFF), so a checksum written
 * by either engine is verified by the other. Slicing by eight: eight tables
 * of 256 words, built once at import, consume eight bytes per step on a
 * little-endian machine; a big-endian one goes a byte at a time.
 */
#ifndef AGENTLOG_CRC32_H
#define AGENTLOG_CRC32_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t agentlog_crc_table[8][256];

#if defined(__x86_64__) && defined(__GNUC__)
#define AGENTLOG_CRC32_CLMUL 1
#include <cpuid.h>
#include <immintrin.h>
/* Whether the CPU has carry-less multiplication (and SSE4.1): asked once. */
static int agentlog_crc_clmul = 0;
#endif

/* Fill the tables; called once when the module is imported. */
static void
agentlog_crc32_init(void)
{
    uint32_t i, j, crc;
#ifdef AGENTLOG_CRC32_CLMUL
    /* CPUID leaf 1 itself, not __builtin_cpu_supports: that one reads the
     * compiler runtime's __cpu_model, which a clang-built (zig cc) shared
     * object cannot reach without a text relocation. ECX bit 1 is PCLMULQDQ,
     * bit 19 SSE4.1. */
    unsigned int eax, ebx, ecx, edx;
    agentlog_crc_clmul = __get_cpuid(1, &eax, &ebx, &ecx, &edx)
        && (ecx & bit_PCLMUL) && (ecx & bit_SSE4_1);
#endif
    for (i = 0; i < 256; i++) {
        crc = i;
        for (j = 0; j < 8; j++) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
        agentlog_crc_table[0][i] = crc;
    }
    for (i = 0; i < 256; i++) {
        crc = agentlog_crc_table[0][i];
        for (j = 1; j < 8; j++) {
            crc = agentlog_crc_table[0][crc & 0xFF] ^ (crc >> 8);
            agentlog_crc_table[j][i] = crc;
        }
    }
}

#ifdef AGENTLOG_CRC32_CLMUL
/* The CRC register (pre-inverted) over size bytes, size >= 64 and a multiple
 * of 16: four 128-bit lanes folded 64 bytes at a time with carry-less
 * multiplication, folded into one, then reduced to 32 bits (Barrett). This
 * is the published folding method for the reflected CRC-32 polynomial (Intel,
 * "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", 2009); the
 * constants are x^k mod P for its fold distances, and mu. Checked against
 * zlib.crc32 at every length by tests/engine/test_crc32.py. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t
agentlog_crc32_fold(uint32_t crc, const unsigned char *p, size_t size)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;
    x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    p += 64;
    size -= 64;
    while (size >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(p + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(p + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(p + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(p + 0x30)));
        p += 64;
        size -= 64;
    }
    /* The four lanes into one. */
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    /* Then 16 bytes at a time. */
    while (size >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)p);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        p += 16;
        size -= 16;
    }
    /* 128 bits to 64. */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_clmulepi64_si128(x1, k5, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction to 32 bits. */
    x2 = _mm_and_si128(x1, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x10);
    x2 = _mm_and_si128(x2, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

/* zlib.crc32(data[:size], crc): pass 0 to start. */
static inline uint32_t
agentlog_crc32(uint32_t crc, const void *data, size_t size)
{
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
#ifdef AGENTLOG_CRC32_CLMUL
    if (agentlog_crc_clmul && size >= 64) {
        size_t folded = size & ~(size_t)15;
        crc = agentlog_crc32_fold(crc, p, folded);
        p += folded;
        size -= folded;
    }
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (size >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = agentlog_crc_table[7][lo & 0xFF] ^ agentlog_crc_table[6][(lo >> 8) & 0xFF]
            ^ agentlog_crc_table[5][(lo >> 16) & 0xFF] ^ agentlog_crc_table[4][lo >> 24]
            ^ agentlog_crc_table[3][hi & 0xFF] ^ agentlog_crc_table[2][(hi >> 8) & 0xFF]
            ^ agentlog_crc_table[1][(hi >> 16) & 0xFF] ^ agentlog_crc_table[0][hi >> 24];
        p += 8;
        size -= 8;
    }
#endif
    while (size--) {
        crc = agentlog_crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    }
    return ~crc;
}

#endif
