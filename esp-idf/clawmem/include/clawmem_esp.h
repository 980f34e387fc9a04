/*
 * clawmem_esp.h: clawmem's flash on an ESP-IDF data partition.
 *
 * clawmem_esp_flash() finds a data partition by its label in the partition
 * table and fills a clawmem_flash_t whose callbacks are esp_partition_read,
 * esp_partition_write and esp_partition_erase_range: 4-byte words that may
 * be programmed again (plain SPI NOR, which clawmem_memory_forget_scrub
 * needs) and the partition's erase unit. A partition with flash encryption
 * is refused: its reads are decrypted, so erased flash does not read as
 * 0xFF, which is how clawmem tells erased from written (an encrypted store
 * needs raw reads, which this glue does not do yet).
 *
 *     static clawmem_store_t store;
 *     static clawmem_esp_partition_t part;
 *     clawmem_flash_t flash;
 *     if (clawmem_esp_flash(&flash, &part, "clawmem") == CLAWMEM_OK)
 *         rc = clawmem_mount(&store, &flash, NULL, CLAWMEM_MOUNT_FORMAT_IF_BLANK);
 *
 * `part` is the callbacks' context: keep it (and the store) alive while the
 * store is mounted. The ESP-IDF calls disable the flash cache while they
 * write or erase, as every flash write on an ESP32 does.
 */
#ifndef CLAWMEM_ESP_H
#define CLAWMEM_ESP_H

#include "clawmem.h"
#include "esp_partition.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The callbacks' context: the partition found. */
typedef struct {
    const esp_partition_t *partition;
    /* The last esp_err_t a callback got (ESP_OK if none failed). */
    esp_err_t last_err;
} clawmem_esp_partition_t;

/*
 * Fills `flash` to drive the data partition labelled `label` (any data
 * subtype). Returns CLAWMEM_OK; CLAWMEM_ERR_INVALID for a NULL argument;
 * CLAWMEM_ERR_NOT_FOUND if the table has no such data partition;
 * CLAWMEM_ERR_UNSUPPORTED if it is encrypted; CLAWMEM_ERR_CONFIG if it is
 * read-only, or not a whole number (at least 4) of its erase units (a power
 * of two from 128 B to 128 KiB). Reads and writes nothing.
 */
int clawmem_esp_flash(clawmem_flash_t *flash, clawmem_esp_partition_t *ctx, const char *label);

#ifdef __cplusplus
}
#endif

#endif
