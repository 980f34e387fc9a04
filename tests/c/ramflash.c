#include "ramflash.h"

#include <stdlib.h>
#include <string.h>

bool ramflash_init(ramflash *f, uint32_t sector_count, uint32_t erase_size,
                   uint32_t prog_size, bool multiwrite) {
    memset(f, 0, sizeof *f);
    f->size = sector_count * erase_size;
    f->read_size = 1;
    f->prog_size = prog_size;
    f->erase_size = erase_size;
    f->multiwrite = multiwrite;
    f->cut_after = -1;
    f->mem = (uint8_t *)malloc(f->size);
    f->written = (uint8_t *)calloc(f->size / prog_size, 1);
    if (!f->mem || !f->written) {
        ramflash_free(f);
        return false;
    }
    memset(f->mem, 0xFF, f->size);
    return true;
}

void ramflash_free(ramflash *f) {
    free(f->mem);
    free(f->written);
    f->mem = NULL;
    f->written = NULL;
}

void ramflash_power_on(ramflash *f) {
    f->cut_after = -1;
    f->dead = false;
}

/* Whether this mutating call is the torn one (it then fails). */
static bool cut_now(ramflash *f) {
    if (f->cut_after < 0) {
        return false;
    }
    if (f->cut_after == 0) {
        f->dead = true;
        return true;
    }
    f->cut_after--;
    return false;
}

static int rf_read(void *ctx, uint32_t off, uint8_t *buf, uint32_t len) {
    ramflash *f = (ramflash *)ctx;
    if (f->dead) {
        return -1;
    }
    if (off > f->size || len > f->size - off || off % f->read_size || len % f->read_size) {
        f->violations++;
        return -2;
    }
    f->reads++;
    memcpy(buf, f->mem + off, len);
    return 0;
}

static int rf_prog(void *ctx, uint32_t off, const uint8_t *buf, uint32_t len) {
    ramflash *f = (ramflash *)ctx;
    uint32_t units, keep, u, i;
    if (f->dead) {
        return -1;
    }
    if (off > f->size || len > f->size - off || off % f->prog_size || len % f->prog_size) {
        f->violations++;
        return -2;
    }
    units = len / f->prog_size;
    keep = units;
    if (cut_now(f)) {
        keep = units / 2; /* torn: the first half of the units land */
    }
    for (u = 0; u < keep; u++) {
        uint32_t at = off + u * f->prog_size;
        if (!f->multiwrite && f->written[at / f->prog_size]) {
            f->violations++;
            return -3;
        }
        for (i = 0; i < f->prog_size; i++) {
            uint8_t old = f->mem[at + i], nw = buf[u * f->prog_size + i];
            if ((uint8_t)(nw & ~old) != 0) {
                f->violations++; /* a 0 bit cannot become 1 */
                return -4;
            }
            f->mem[at + i] = (uint8_t)(old & nw);
        }
        f->written[at / f->prog_size] = 1;
    }
    if (f->dead) {
        return -1;
    }
    f->progs++;
    f->prog_bytes += len;
    return 0;
}

static int rf_erase(void *ctx, uint32_t off, uint32_t len) {
    ramflash *f = (ramflash *)ctx;
    uint32_t sectors, keep, s;
    if (f->dead) {
        return -1;
    }
    if (off > f->size || len > f->size - off || off % f->erase_size || len % f->erase_size) {
        f->violations++;
        return -2;
    }
    sectors = len / f->erase_size;
    keep = sectors;
    if (cut_now(f)) {
        keep = sectors / 2;
        /* A cut erase of one sector leaves it half erased. */
        if (sectors == 1) {
            memset(f->mem + off, 0xFF, f->erase_size / 2);
            memset(f->written + off / f->prog_size, 0, f->erase_size / 2 / f->prog_size);
        }
    }
    for (s = 0; s < keep; s++) {
        uint32_t at = off + s * f->erase_size;
        memset(f->mem + at, 0xFF, f->erase_size);
        memset(f->written + at / f->prog_size, 0, f->erase_size / f->prog_size);
    }
    if (f->dead) {
        return -1;
    }
    f->erases += sectors;
    return 0;
}

clawmem_flash_t ramflash_as_clawmem(ramflash *f) {
    clawmem_flash_t c;
    memset(&c, 0, sizeof c);
    c.ctx = f;
    c.read = rf_read;
    c.prog = rf_prog;
    c.erase = rf_erase;
    c.read_size = f->read_size;
    c.prog_size = f->prog_size;
    c.erase_size = f->erase_size;
    c.sector_count = f->size / f->erase_size;
    c.multiwrite = f->multiwrite;
    return c;
}
