/*
 * A host stand-in for ESP-IDF's esp_partition.h: the types and the four
 * calls esp-idf/clawmem/clawmem_esp.c uses, with ESP-IDF's signatures, so
 * that the glue compiles and runs in the host C tests. The fake
 * (fake_esp_partition.c) keeps one partition table whose partitions sit on
 * ramflash, which enforces NOR rules, and follows ESP-IDF's argument
 * checks (ranges inside the partition, erases on 4 KiB sectors, 16-byte
 * writes on an encrypted partition).
 */
#ifndef FAKE_ESP_PARTITION_H
#define FAKE_ESP_PARTITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int esp_err_t;
#define ESP_OK 0
#define ESP_FAIL -1
#define ESP_ERR_INVALID_ARG 0x102
#define ESP_ERR_INVALID_SIZE 0x104
#define ESP_ERR_NOT_ALLOWED 0x10D

typedef enum { ESP_PARTITION_TYPE_APP = 0x00, ESP_PARTITION_TYPE_DATA = 0x01 } esp_partition_type_t;
typedef enum { ESP_PARTITION_SUBTYPE_ANY = 0xff } esp_partition_subtype_t;

typedef struct {
    void *flash_chip;
    esp_partition_type_t type;
    esp_partition_subtype_t subtype;
    uint32_t address;
    uint32_t size;
    uint32_t erase_size;
    char label[17];
    bool encrypted;
    bool readonly;
} esp_partition_t;

const esp_partition_t *esp_partition_find_first(esp_partition_type_t type,
                                                esp_partition_subtype_t subtype,
                                                const char *label);
esp_err_t esp_partition_read(const esp_partition_t *partition, size_t src_offset, void *dst,
                             size_t size);
esp_err_t esp_partition_write(const esp_partition_t *partition, size_t dst_offset,
                              const void *src, size_t size);
esp_err_t esp_partition_erase_range(const esp_partition_t *partition, size_t offset,
                                    size_t size);

#endif
