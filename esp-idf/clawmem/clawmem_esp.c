/*
 * clawmem's flash callbacks on an ESP-IDF partition (clawmem_esp.h).
 *
 * Each callback is one esp_partition_* call on the partition found by
 * label; an esp_err_t other than ESP_OK is returned negated (clawmem sees
 * a failed call and reports CLAWMEM_ERR_FLASH; the code is kept in the
 * context). Offsets are the partition's, as clawmem's are. Power loss: a
 * cut during a call leaves what the flash chip leaves; clawmem's format
 * is made for that.
 */
#include "clawmem_esp.h"

#include <string.h>


static int esp_result(clawmem_esp_partition_t *p, esp_err_t err) {
    if (err == ESP_OK) {
        return 0;
    }
    p->last_err = err;
    return err > 0 ? -(int)err : -1;
}

static int esp_read(void *ctx, uint32_t off, uint8_t *buf, uint32_t len) {
    clawmem_esp_partition_t *p = (clawmem_esp_partition_t *)ctx;
    return esp_result(p, esp_partition_read(p->partition, off, buf, len));
}

static int esp_prog(void *ctx, uint32_t off, const uint8_t *buf, uint32_t len) {
    clawmem_esp_partition_t *p = (clawmem_esp_partition_t *)ctx;
    return esp_result(p, esp_partition_write(p->partition, off, buf, len));
}

static int esp_erase(void *ctx, uint32_t off, uint32_t len) {
    clawmem_esp_partition_t *p = (clawmem_esp_partition_t *)ctx;
    return esp_result(p, esp_partition_erase_range(p->partition, off, len));
}

int clawmem_esp_flash(clawmem_flash_t *flash, clawmem_esp_partition_t *ctx, const char *label) {
    const esp_partition_t *part;
    if (flash == NULL || ctx == NULL || label == NULL) {
        return CLAWMEM_ERR_INVALID;
    }
    part = esp_partition_find_first(ESP_PARTITION_TYPE_DATA, ESP_PARTITION_SUBTYPE_ANY, label);
    if (part == NULL) {
        return CLAWMEM_ERR_NOT_FOUND;
    }
    /* Reads of an encrypted partition are decrypted, so erased flash does
     * not read back as 0xFF, which is how clawmem tells erased from
     * written: such a partition is refused, never misread. */
    if (part->encrypted) {
        return CLAWMEM_ERR_UNSUPPORTED;
    }
    /* The partition's own erase unit (4 KiB on the chip's SPI flash). */
    if (part->readonly || part->erase_size < 128 || part->erase_size > 128u * 1024u ||
        (part->erase_size & (part->erase_size - 1)) != 0 || part->size % part->erase_size != 0 ||
        part->size / part->erase_size < 4) {
        return CLAWMEM_ERR_CONFIG;
    }
    memset(ctx, 0, sizeof *ctx);
    ctx->partition = part;
    ctx->last_err = ESP_OK;
    memset(flash, 0, sizeof *flash);
    flash->ctx = ctx;
    flash->read = esp_read;
    flash->prog = esp_prog;
    flash->erase = esp_erase;
    flash->read_size = 1;
    /* SPI NOR: 4-byte words, which may be programmed again. */
    flash->prog_size = 4;
    flash->erase_size = part->erase_size;
    flash->sector_count = (uint32_t)(part->size / part->erase_size);
    flash->multiwrite = true;
    return CLAWMEM_OK;
}
