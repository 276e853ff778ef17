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

/* Fill the tables; called once when the module is imported. */
static void
agentlog_crc32_init(void)
{
    uint32_t i, j, crc;
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

/* zlib.crc32(data[:size], crc): pass 0 to start. */
static inline uint32_t
agentlog_crc32(uint32_t crc, const void *data, size_t size)
{
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
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
