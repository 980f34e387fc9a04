/*
 * ramflash: a NOR flash in RAM for the C API's tests, enforcing NOR rules.
 *
 * Every program must be aligned to prog_size, inside the partition, and may
 * only clear bits (1 to 0). Without multiwrite, each prog_size unit may be
 * programmed once between erases, as with ESP32 flash encryption. A power
 * cut is modelled by cut_after: after that many more mutating calls (prog
 * or erase) succeed, the next one is torn (a prog writes its first half of
 * units, an erase fills its first half of sectors with 0xFF... and leaves
 * the rest) and fails, and every call after it fails too, until the test
 * clears the cut and mounts afresh.
 */
#ifndef RAMFLASH_H
#define RAMFLASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clawmem.h"

typedef struct {
    uint8_t *mem;
    uint8_t *written; /* one flag per prog unit: programmed since erase */
    uint32_t size;
    uint32_t read_size; /* 1 unless a test sets it: reads must be aligned to it */
    uint32_t prog_size;
    uint32_t erase_size;
    bool multiwrite;
    /* -1: no cut; else the mutating calls left before the torn one. */
    long cut_after;
    bool dead;
    unsigned long progs, erases, reads;
    unsigned long prog_bytes; /* bytes of the programs that succeeded */
    unsigned long violations; /* NOR rule breaches seen (must stay 0) */
} ramflash;

/* A blank (all 0xFF) flash of sector_count sectors; false if out of memory. */
bool ramflash_init(ramflash *f, uint32_t sector_count, uint32_t erase_size,
                   uint32_t prog_size, bool multiwrite);
void ramflash_free(ramflash *f);
/* The clawmem_flash_t that drives f. */
clawmem_flash_t ramflash_as_clawmem(ramflash *f);
/* Power back on: no cut pending, calls succeed again. */
void ramflash_power_on(ramflash *f);

#endif
