/* The fake partition table of the host tests (see fake-idf/esp_partition.h). */
#ifndef FAKE_ESP_PARTITION_TABLE_H
#define FAKE_ESP_PARTITION_TABLE_H

#include "esp_partition.h"
#include "ramflash.h"

/* Adds a partition backed by `flash` (prog units of 16 if encrypted). */
void fake_partition_add(const char *label, esp_partition_type_t type, ramflash *flash,
                        bool encrypted, bool readonly);
/* Empties the table. */
void fake_partition_reset(void);

#endif
