/*
 * The ESP-IDF component's glue (esp-idf/clawmem/clawmem_esp.c) on the
 * host, against a fake of esp_partition_* (fake_esp_partition.c) whose
 * partitions sit on ramflash: finding the partition by label, refusing
 * bad ones (an encrypted one among them: its reads are decrypted), a store
 * on a partition that wraps its ring, a remount, and an esp_err_t passed
 * back.
 */
#include <stdio.h>
#include <string.h>

#include "clawmem_esp.h"
#include "fake_esp_partition.h"
#include "check.h"

int failures = 0;

static clawmem_store_t store;

static void store_and_read_back(const char *label) {
    ramflash f;
    clawmem_flash_t flash;
    clawmem_esp_partition_t part;
    clawmem_config_t config;
    clawmem_record_t r[2];
    clawmem_history_t h;
    static uint8_t buf[4096];
    const char *q = "{\"role\":\"user\",\"content\":\"remind me at 5\"}";
    const char *a = "{\"role\":\"assistant\",\"content\":\"Reminder set for 5 pm.\"}";
    int t;
    CHECK(ramflash_init(&f, 16, 4096, 4, true));
    fake_partition_reset();
    fake_partition_add("nvs", ESP_PARTITION_TYPE_DATA, &f, false, false);
    fake_partition_add(label, ESP_PARTITION_TYPE_DATA, &f, false, false);
    CHECK(clawmem_esp_flash(&flash, &part, label) == CLAWMEM_OK);
    CHECK(flash.sector_count == 16 && flash.erase_size == 4096);
    CHECK(flash.prog_size == 4u && flash.multiwrite);
    clawmem_config_init(&config);
    config.session_size_limit_bytes = 16 * 1024;
    CHECK(clawmem_mount(&store, &flash, &config, CLAWMEM_MOUNT_FORMAT_IF_BLANK) == CLAWMEM_OK);
    r[0].type_ = CLAWMEM_RECORD_USER;
    r[1].type_ = CLAWMEM_RECORD_ASSISTANT_FINAL;
    r[0].format = r[1].format = CLAWMEM_FORMAT_OPENAI;
    r[0].body = (const uint8_t *)q;
    r[0].body_len = strlen(q);
    r[1].body = (const uint8_t *)a;
    r[1].body_len = strlen(a);
    for (t = 0; t < 1000; t++) {
        CHECK(clawmem_append(&store, "telegram:7", r, 2, true, NULL) == CLAWMEM_OK);
        if (t % 10 == 9) {
            /* Keep the session short: the ring wraps under it. */
            CHECK(clawmem_session_delete(&store, "telegram:7") == CLAWMEM_OK);
        }
    }
    CHECK(clawmem_unmount(&store) == CLAWMEM_OK);
    CHECK(clawmem_mount(&store, &flash, &config, CLAWMEM_MOUNT_EXISTING) == CLAWMEM_OK);
    CHECK(clawmem_history(&store, "telegram:7", CLAWMEM_FORMAT_OPENAI, buf, sizeof buf, &h) ==
          CLAWMEM_ERR_NOT_FOUND);
    CHECK(clawmem_append(&store, "telegram:7", r, 2, true, NULL) == CLAWMEM_OK);
    CHECK(clawmem_history(&store, "telegram:7", CLAWMEM_FORMAT_OPENAI, buf, sizeof buf, &h) ==
          CLAWMEM_OK);
    CHECK(h.records == 2);
    CHECK(f.violations == 0 && part.last_err == ESP_OK);
    CHECK(f.erases > 16); /* the ring wrapped */
    ramflash_free(&f);
}

static void bad_partitions(void) {
    ramflash f, odd;
    clawmem_flash_t flash;
    clawmem_esp_partition_t part;
    CHECK(ramflash_init(&f, 8, 4096, 4, true));
    CHECK(ramflash_init(&odd, 3, 4096, 4, true));
    fake_partition_reset();
    fake_partition_add("ro", ESP_PARTITION_TYPE_DATA, &f, false, true);
    fake_partition_add("tiny", ESP_PARTITION_TYPE_DATA, &odd, false, false);
    fake_partition_add("app", ESP_PARTITION_TYPE_APP, &f, false, false);
    fake_partition_add("enc", ESP_PARTITION_TYPE_DATA, &f, true, false);
    CHECK(clawmem_esp_flash(&flash, &part, "missing") == CLAWMEM_ERR_NOT_FOUND);
    CHECK(clawmem_esp_flash(&flash, &part, "app") == CLAWMEM_ERR_NOT_FOUND);
    CHECK(clawmem_esp_flash(&flash, &part, "ro") == CLAWMEM_ERR_CONFIG);
    CHECK(clawmem_esp_flash(&flash, &part, "tiny") == CLAWMEM_ERR_CONFIG);
    CHECK(clawmem_esp_flash(&flash, &part, "enc") == CLAWMEM_ERR_UNSUPPORTED);
    CHECK(clawmem_esp_flash(NULL, &part, "ro") == CLAWMEM_ERR_INVALID);
    CHECK(clawmem_esp_flash(&flash, NULL, "ro") == CLAWMEM_ERR_INVALID);
    CHECK(clawmem_esp_flash(&flash, &part, NULL) == CLAWMEM_ERR_INVALID);
    ramflash_free(&f);
    ramflash_free(&odd);
}

/* A failing esp_partition_* call reaches the caller as a flash error. */
static void esp_errors_pass_back(void) {
    ramflash f;
    clawmem_flash_t flash;
    clawmem_esp_partition_t part;
    clawmem_config_t config;
    CHECK(ramflash_init(&f, 16, 4096, 4, true));
    fake_partition_reset();
    fake_partition_add("clawmem", ESP_PARTITION_TYPE_DATA, &f, false, false);
    CHECK(clawmem_esp_flash(&flash, &part, "clawmem") == CLAWMEM_OK);
    clawmem_config_init(&config);
    config.session_size_limit_bytes = 16 * 1024;
    f.cut_after = 0; /* the flash dies at the first write */
    CHECK(clawmem_format(&store, &flash, &config) == CLAWMEM_ERR_FLASH);
    CHECK(part.last_err == ESP_FAIL);
    ramflash_free(&f);
}

int main(void) {
    bad_partitions();
    store_and_read_back("clawmem");
    esp_errors_pass_back();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("clawmem ESP-IDF glue: all checks passed\n");
    return 0;
}
