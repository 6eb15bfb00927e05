/*
 * workers/common: randomness, of two strengths.
 *
 * Ids (tasks, rooms, sub-goals) must be unpredictable and unique across
 * processes and machines, so they come from the kernel: ioa_uuid4_hex()
 * makes IoA's uuid4().hex, 32 lower-case hex digits.  Jitter only needs to
 * differ between processes, so ioa_random() is a xorshift64* generator
 * seeded once from the kernel by ioa_random_init().
 */

#ifndef IOA_RANDOM_H
#define IOA_RANDOM_H


#include <stddef.h>
#include <stdint.h>


void     ioa_random_bytes(void *buf, size_t len);
void     ioa_uuid4_hex(char out[33]);
void     ioa_random_init(void);
uint64_t ioa_random(void);


#endif /* IOA_RANDOM_H */
