/*
 * clawmem_esp.h: clawmem's flash on an ESP-IDF data partition.
 *
 * clawmem_esp_flash() finds a data partition by its label in the partition
 * table and fills a clawmem_flash_t whose callbacks are esp_partition_read,
 * esp_partition_write and esp_partition_erase_range. On a partition with
 * flash encryption the program unit is 16 bytes, each written once between
 * erases (multiwrite false); otherwise it is 4 bytes and a word may be
 * programmed again (plain SPI NOR, which clawmem_memory_forget_scrub needs).
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
 * CLAWMEM_ERR_CONFIG if it is read-only, or not a whole number (at least 4)
 * of 4 KiB sectors. Reads and writes nothing.
 */
int clawmem_esp_flash(clawmem_flash_t *flash, clawmem_esp_partition_t *ctx, const char *label);

#ifdef __cplusplus
}
#endif

#endif
