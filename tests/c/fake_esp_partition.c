#include "fake_esp_partition.h"

#include <string.h>

#define MAX_PARTS 4

static esp_partition_t parts[MAX_PARTS];
static ramflash *flashes[MAX_PARTS];
static int n_parts;

void fake_partition_reset(void) {
    n_parts = 0;
}

void fake_partition_add(const char *label, esp_partition_type_t type, ramflash *flash,
                        bool encrypted, bool readonly) {
    esp_partition_t *p = &parts[n_parts];
    memset(p, 0, sizeof *p);
    p->type = type;
    p->subtype = (esp_partition_subtype_t)0x99;
    p->address = 0x110000u + 0x100000u * (uint32_t)n_parts;
    p->size = flash->size;
    p->erase_size = 4096;
    strncpy(p->label, label, sizeof p->label - 1);
    p->encrypted = encrypted;
    p->readonly = readonly;
    flashes[n_parts++] = flash;
}

static ramflash *flash_of(const esp_partition_t *p) {
    int i;
    for (i = 0; i < n_parts; i++) {
        if (&parts[i] == p) return flashes[i];
    }
    return NULL;
}

const esp_partition_t *esp_partition_find_first(esp_partition_type_t type,
                                                esp_partition_subtype_t subtype,
                                                const char *label) {
    int i;
    for (i = 0; i < n_parts; i++) {
        if (parts[i].type == type &&
            (subtype == ESP_PARTITION_SUBTYPE_ANY || parts[i].subtype == subtype) &&
            (label == NULL || strcmp(parts[i].label, label) == 0)) {
            return &parts[i];
        }
    }
    return NULL;
}

/* ESP-IDF's checks, then the RAM flash through its clawmem callbacks. */
esp_err_t esp_partition_read(const esp_partition_t *p, size_t off, void *dst, size_t size) {
    ramflash *f = flash_of(p);
    clawmem_flash_t c;
    if (!f || dst == NULL) return ESP_ERR_INVALID_ARG;
    if (off > p->size || size > p->size - off) return ESP_ERR_INVALID_SIZE;
    c = ramflash_as_clawmem(f);
    return c.read(c.ctx, (uint32_t)off, (uint8_t *)dst, (uint32_t)size) == 0 ? ESP_OK : ESP_FAIL;
}

esp_err_t esp_partition_write(const esp_partition_t *p, size_t off, const void *src, size_t size) {
    ramflash *f = flash_of(p);
    clawmem_flash_t c;
    if (!f || src == NULL) return ESP_ERR_INVALID_ARG;
    if (p->readonly) return ESP_ERR_NOT_ALLOWED;
    if (off > p->size || size > p->size - off) return ESP_ERR_INVALID_SIZE;
    if (p->encrypted && (off % 16 != 0 || size % 16 != 0)) return ESP_ERR_INVALID_SIZE;
    c = ramflash_as_clawmem(f);
    return c.prog(c.ctx, (uint32_t)off, (const uint8_t *)src, (uint32_t)size) == 0 ? ESP_OK : ESP_FAIL;
}

esp_err_t esp_partition_erase_range(const esp_partition_t *p, size_t off, size_t size) {
    ramflash *f = flash_of(p);
    clawmem_flash_t c;
    if (!f) return ESP_ERR_INVALID_ARG;
    if (p->readonly) return ESP_ERR_NOT_ALLOWED;
    if (off > p->size || size > p->size - off) return ESP_ERR_INVALID_SIZE;
    if (off % p->erase_size != 0 || size % p->erase_size != 0) return ESP_ERR_INVALID_SIZE;
    c = ramflash_as_clawmem(f);
    return c.erase(c.ctx, (uint32_t)off, (uint32_t)size) == 0 ? ESP_OK : ESP_FAIL;
}
