/* The checks of the C tests: a failed one is reported with its line, counted
 * in `failures` (which the test defines), and ends the test function. */
#ifndef CLAWMEM_TEST_CHECK_H
#define CLAWMEM_TEST_CHECK_H

#include <stdio.h>

extern int failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
            return;                                                                  \
        }                                                                            \
    } while (0)

#endif
