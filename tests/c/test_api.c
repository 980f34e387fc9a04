/*
 * The C API's host test: every function of clawmem.h, bad arguments, and
 * power cuts on a RAM flash that enforces NOR rules (ramflash.c).
 *
 * Built by scripts/c-tests.sh as C99 and as C++ with -Wall -Wextra -Werror,
 * linked against the clawmem-c staticlib. Exits 0 when every check holds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clawmem.h"
#include "ramflash.h"
#include "check.h"

int failures = 0;

#define CHECK_RC(call, want)                                                     \
    do {                                                                         \
        int rc_ = (call);                                                        \
        if (rc_ != (want)) {                                                     \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d\n", __FILE__, \
                    __LINE__, #call, rc_, clawmem_strerror(rc_), (int)(want));   \
            failures++;                                                          \
            return;                                                              \
        }                                                                        \
    } while (0)

#define OK(call) CHECK_RC(call, CLAWMEM_OK)

/* Two stores, static as a firmware keeps them. */
static clawmem_store_t store_a;
static clawmem_store_t store_b;

static clawmem_record_t rec(uint8_t type, const char *body) {
    clawmem_record_t r;
    r.type_ = type;
    r.format = CLAWMEM_FORMAT_OPENAI;
    r.body = (const uint8_t *)body;
    r.body_len = strlen(body);
    return r;
}

/* A small store's configuration: the 150 KiB limit needs a larger flash. */
static clawmem_config_t small_config(void) {
    clawmem_config_t c;
    clawmem_config_init(&c);
    c.session_size_limit_bytes = 16 * 1024;
    return c;
}

/* ---- arguments ----------------------------------------------------------- */

static void test_bad_arguments(void) {
    unsigned long progs_after_format, erases_after_format;
    ramflash f;
    clawmem_flash_t cf;
    clawmem_config_t c = small_config();
    char msg[256];
    size_t len = 0;
    CHECK(ramflash_init(&f, 32, 4096, 4, true));
    cf = ramflash_as_clawmem(&f);

    CHECK(clawmem_store_used() <= clawmem_store_size());
    printf("clawmem_store_t: %zu B, of which this build uses %zu B\n", clawmem_store_size(),
           clawmem_store_used());
    CHECK(clawmem_store_size() == sizeof(clawmem_store_t));

    /* NULL pointers and a misaligned store. */
    CHECK_RC(clawmem_mount(NULL, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK), CLAWMEM_ERR_INVALID);
    CHECK_RC(clawmem_mount(&store_a, NULL, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK), CLAWMEM_ERR_INVALID);
    OK(clawmem_last_error(&store_a, msg, sizeof msg, &len));
    CHECK(strcmp(msg, "flash is NULL") == 0 && len == strlen(msg));
    CHECK_RC(clawmem_mount((clawmem_store_t *)((char *)&store_b + 4), &cf, &c,
                           CLAWMEM_MOUNT_FORMAT_IF_BLANK),
             CLAWMEM_ERR_INVALID);
    CHECK_RC(clawmem_mount(&store_a, &cf, &c, 7), CLAWMEM_ERR_INVALID);

    /* Geometry the engine cannot use. */
    cf.prog_size = 3;
    CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK), CLAWMEM_ERR_CONFIG);
    OK(clawmem_last_error(&store_a, msg, sizeof msg, NULL));
    CHECK(strstr(msg, "prog_size") != NULL);
    cf = ramflash_as_clawmem(&f);
    cf.sector_count = 2;
    CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK), CLAWMEM_ERR_CONFIG);
    cf = ramflash_as_clawmem(&f);
    cf.erase_size = 100;
    CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK), CLAWMEM_ERR_CONFIG);
    cf = ramflash_as_clawmem(&f);
    cf.read = NULL;
    CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK), CLAWMEM_ERR_CONFIG);
    cf = ramflash_as_clawmem(&f);
    /* A session limit the partition cannot hold. */
    clawmem_config_init(&c);
    CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK), CLAWMEM_ERR_CONFIG);
    OK(clawmem_last_error(&store_a, msg, sizeof msg, NULL));
    CHECK(strstr(msg, "session size limit") != NULL);
    /* Values near UINT32_MAX are refused, not wrapped round to a fit. */
    c = small_config();
    c.session_size_limit_bytes = 0xFFFFFFFFu;
    CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK), CLAWMEM_ERR_CONFIG);
    c = small_config();
    c.knowledge_reserve_bytes = 0xFFFFF000u;
    CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK), CLAWMEM_ERR_CONFIG);
    c = small_config();
    c.profile_max_bytes = 0xFFFFFFFFu;
    OK(clawmem_format(&store_a, &cf, &c)); /* the reserve saturates at a sixteenth */
    OK(clawmem_unmount(&store_a));
    memset(f.mem, 0xFF, f.size);
    memset(f.written, 0, f.size / f.prog_size);
    f.progs = f.erases = 0;
    c = small_config();

    /* Nothing was written by any refused mount. */
    CHECK(f.progs == 0 && f.erases == 0);

    /* Not mounted: every call says so. */
    CHECK_RC(clawmem_append(&store_a, "s", NULL, 0, false, NULL), CLAWMEM_ERR_NOT_MOUNTED);
    CHECK_RC(clawmem_space(&store_a, NULL), CLAWMEM_ERR_NOT_MOUNTED);

    /* A blank partition: existing-only refuses, format-if-blank formats. */
    CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_EXISTING), CLAWMEM_ERR_NOT_FORMATTED);
    OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK));
    progs_after_format = f.progs;
    erases_after_format = f.erases;

    /* Bad texts and records. */
    {
        clawmem_record_t r = rec(CLAWMEM_RECORD_USER, "{\"role\":\"user\",\"content\":\"hi\"}");
        const char bad_utf8[] = {'s', (char)0xC3, (char)0x28, 0};
        CHECK_RC(clawmem_append(&store_a, NULL, &r, 1, false, NULL), CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_append(&store_a, bad_utf8, &r, 1, false, NULL), CLAWMEM_ERR_INVALID);
        OK(clawmem_last_error(&store_a, msg, sizeof msg, NULL));
        CHECK(strstr(msg, "UTF-8") != NULL);
        CHECK_RC(clawmem_append(&store_a, "s", NULL, 1, false, NULL), CLAWMEM_ERR_INVALID);
        r.type_ = 9;
        CHECK_RC(clawmem_append(&store_a, "s", &r, 1, false, NULL), CLAWMEM_ERR_INVALID);
        r = rec(CLAWMEM_RECORD_USER, "x");
        r.body = NULL;
        CHECK_RC(clawmem_append(&store_a, "s", &r, 1, false, NULL), CLAWMEM_ERR_INVALID);
        r.format = 77;
        CHECK_RC(clawmem_append(&store_a, "s", &r, 1, false, NULL), CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_append(&store_a, "s", &r, 1000, false, NULL), CLAWMEM_ERR_TOO_LARGE);
        CHECK_RC(clawmem_profile_write(&store_a, 9, "x", 1), CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_profile_write(&store_a, CLAWMEM_PROFILE_USER, bad_utf8, 3), CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_history(&store_a, "s", CLAWMEM_FORMAT_OPENAI, NULL, 10, NULL), CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_memory_store(&store_a, NULL, 0, false, NULL), CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_history_next(NULL, NULL, NULL), CLAWMEM_ERR_INVALID);
    }
    /* None of that reached the flash beyond the format. */
    {
        size_t n = 99;
        OK(clawmem_session_list(&store_a, NULL, NULL, &n));
        CHECK(n == 0);
        CHECK(f.progs == progs_after_format && f.erases == erases_after_format);
    }
    CHECK(f.violations == 0);
    /* A copy of a mounted store is not the store: refused, not aliased. */
    {
        static clawmem_store_t copy;
        size_t n = 0;
        memcpy(&copy, &store_a, sizeof copy);
        CHECK_RC(clawmem_session_list(&copy, NULL, NULL, &n), CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_unmount(&copy), CLAWMEM_ERR_INVALID);
        OK(clawmem_session_list(&store_a, NULL, NULL, &n));
    }
    OK(clawmem_unmount(&store_a));
    CHECK_RC(clawmem_unmount(&store_a), CLAWMEM_ERR_NOT_MOUNTED);
    OK(clawmem_last_error(&store_a, msg, sizeof msg, NULL));
    CHECK(strstr(msg, "not mounted") != NULL);
    ramflash_free(&f);
}

/* ---- sessions ------------------------------------------------------------ */

typedef struct {
    int count;
    char ids[8][64];
    uint32_t records[8];
} session_seen;

static void on_session(void *ctx, const char *id, size_t id_len, const clawmem_session_info_t *info) {
    session_seen *s = (session_seen *)ctx;
    if (s->count < 8 && id_len < 64 && strlen(id) == id_len) {
        memcpy(s->ids[s->count], id, id_len + 1);
        s->records[s->count] = info->records;
    }
    s->count++;
}

static const char *const BODIES[4] = {
    "{\"role\":\"user\",\"content\":\"What is on my calendar?\"}",
    "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\"}]}",
    "[{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"dentist at 3\"}]",
    "{\"role\":\"assistant\",\"content\":\"A dentist appointment at 3 pm.\"}",
};

static const uint8_t TYPES[4] = {CLAWMEM_RECORD_USER, CLAWMEM_RECORD_ASSISTANT_TOOL,
                                 CLAWMEM_RECORD_TOOL_RESULT, CLAWMEM_RECORD_ASSISTANT_FINAL};

static void append_turn(clawmem_store_t *s, const char *session, int *rc) {
    clawmem_record_t r[4];
    clawmem_appended_t a;
    int k;
    for (k = 0; k < 4; k++) {
        r[k] = rec(TYPES[k], BODIES[k]);
    }
    *rc = clawmem_append(s, session, r, 4, true, &a);
}

/* Whether `session` reads back exactly `turns` turns of BODIES. */
static bool history_is(clawmem_store_t *s, const char *session, int turns) {
    static uint8_t buf[16384];
    clawmem_history_t h;
    clawmem_record_t r;
    size_t cursor = 0;
    int k = 0;
    if (clawmem_history(s, session, CLAWMEM_FORMAT_OPENAI, buf, sizeof buf, &h) != CLAWMEM_OK) {
        return false;
    }
    while (clawmem_history_next(&h, &cursor, &r) == 1) {
        const char *want = BODIES[k % 4];
        if (r.type_ != TYPES[k % 4] || r.format != CLAWMEM_FORMAT_OPENAI ||
            r.body_len != strlen(want) || memcmp(r.body, want, r.body_len) != 0) {
            return false;
        }
        k++;
    }
    if (!(k == 4 * turns && h.records == (uint32_t)k && cursor == h.used_bytes &&
          h.damaged_records == 0)) {
        return false;
    }
    /* The same records, streamed through a buffer of the longest one. */
    {
        static uint8_t one[512];
        clawmem_history_stream_t st;
        clawmem_history_stream_info_t si;
        size_t total = 0;
        int j = 0, rc;
        if (clawmem_history_stream_open(s, session, CLAWMEM_FORMAT_OPENAI, one, sizeof one, &st,
                                        &si) != CLAWMEM_OK ||
            si.records != (uint32_t)k || si.damaged_records != 0 ||
            si.buffer_bytes > sizeof one) {
            return false;
        }
        while ((rc = clawmem_history_stream_next(s, &st, one, si.buffer_bytes, &r)) == 1) {
            const char *want = BODIES[j % 4];
            if (r.type_ != TYPES[j % 4] || r.body_len != strlen(want) ||
                memcmp(r.body, want, r.body_len) != 0) {
                return false;
            }
            total += r.body_len;
            j++;
        }
        return rc == 0 && j == k && total == si.total_bytes;
    }
}

/* Checks that `session` reads back `turns` turns of BODIES (none: not found). */
static void expect_history(clawmem_store_t *s, const char *session, int turns) {
    static uint8_t buf[64];
    clawmem_history_t h;
    if (turns == 0) {
        CHECK_RC(clawmem_history(s, session, CLAWMEM_FORMAT_OPENAI, buf, sizeof buf, &h),
                 CLAWMEM_ERR_NOT_FOUND);
        return;
    }
    CHECK(history_is(s, session, turns));
}

static void test_sessions(void) {
    ramflash f;
    clawmem_flash_t cf;
    clawmem_config_t c = small_config();
    clawmem_session_info_t info;
    session_seen seen;
    size_t n = 0, len = 0;
    int rc, t;
    bool blocked = true;
    char warning[512];
    CHECK(ramflash_init(&f, 32, 4096, 4, true));
    cf = ramflash_as_clawmem(&f);
    OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK));

    for (t = 0; t < 3; t++) {
        append_turn(&store_a, "chat:telegram:42", &rc);
        OK(rc);
    }
    append_turn(&store_a, "cli:default", &rc);
    OK(rc);
    expect_history(&store_a, "chat:telegram:42", 3);
    expect_history(&store_a, "cli:default", 1);

    /* A session that does not exist is not found. */
    expect_history(&store_a, "nobody", 0);

    /* A history stream: a buffer too small, bad arguments, a stream that
     * was never opened, and one voided by a write to its session. */
    {
        static uint8_t one[512];
        clawmem_history_stream_t st;
        clawmem_history_stream_info_t si;
        clawmem_record_t r;
        memset(&st, 0, sizeof st);
        CHECK_RC(clawmem_history_stream_open(&store_a, "chat:telegram:42", CLAWMEM_FORMAT_OPENAI,
                                             one, 4, &st, &si),
                 CLAWMEM_ERR_BUFFER_TOO_SMALL);
        CHECK(si.needed_bytes > 4);
        CHECK_RC(clawmem_history_stream_next(&store_a, &st, one, sizeof one, &r),
                 CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_history_stream_open(&store_a, "nobody", CLAWMEM_FORMAT_OPENAI, one,
                                             sizeof one, &st, &si),
                 CLAWMEM_ERR_NOT_FOUND);
        CHECK_RC(clawmem_history_stream_open(&store_a, "cli:default", CLAWMEM_FORMAT_OPENAI, one,
                                             sizeof one, &st, NULL),
                 CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_history_stream_open(&store_a, "cli:default", CLAWMEM_FORMAT_OPENAI, one,
                                             sizeof one, NULL, &si),
                 CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_history_stream_open(&store_a, "cli:default", 9, one, sizeof one, &st,
                                             &si),
                 CLAWMEM_ERR_INVALID);
        append_turn(&store_a, "stale", &rc);
        OK(rc);
        OK(clawmem_history_stream_open(&store_a, "stale", CLAWMEM_FORMAT_OPENAI, one, sizeof one,
                                       &st, &si));
        CHECK(si.records == 4 && si.buffer_bytes <= sizeof one && si.total_bytes > 0);
        CHECK_RC(clawmem_history_stream_next(&store_a, &st, one, si.buffer_bytes - 1, &r),
                 CLAWMEM_ERR_BUFFER_TOO_SMALL);
        CHECK_RC(clawmem_history_stream_next(&store_a, NULL, one, sizeof one, &r),
                 CLAWMEM_ERR_INVALID);
        CHECK_RC(clawmem_history_stream_next(&store_a, &st, one, sizeof one, NULL),
                 CLAWMEM_ERR_INVALID);
        CHECK(clawmem_history_stream_next(&store_a, &st, one, sizeof one, &r) == 1);
        CHECK(r.type_ == TYPES[0] && r.body_len == strlen(BODIES[0]));
        append_turn(&store_a, "stale", &rc);
        OK(rc);
        CHECK_RC(clawmem_history_stream_next(&store_a, &st, one, sizeof one, &r),
                 CLAWMEM_ERR_INVALID);
        expect_history(&store_a, "stale", 2);
        OK(clawmem_session_delete(&store_a, "stale"));
    }

    /* A buffer that is too small says how large it must be. */
    {
        uint8_t small[16];
        static uint8_t exact[16384];
        clawmem_history_t h;
        CHECK_RC(clawmem_history(&store_a, "chat:telegram:42", CLAWMEM_FORMAT_OPENAI, small,
                                 sizeof small, &h),
                 CLAWMEM_ERR_BUFFER_TOO_SMALL);
        CHECK(h.needed_bytes > sizeof small);
        OK(clawmem_history(&store_a, "chat:telegram:42", CLAWMEM_FORMAT_OPENAI, exact,
                           h.needed_bytes, &h));
        CHECK(h.records == 12);
    }

    OK(clawmem_session_info(&store_a, "chat:telegram:42", &info));
    CHECK(info.records == 12 && !info.blocked);
    CHECK(info.size_bytes > 0);
    CHECK_RC(clawmem_session_info(&store_a, "nobody", &info), CLAWMEM_ERR_NOT_FOUND);

    memset(&seen, 0, sizeof seen);
    OK(clawmem_session_list(&store_a, on_session, &seen, &n));
    CHECK(n == 2 && seen.count == 2);
    CHECK((strcmp(seen.ids[0], "chat:telegram:42") == 0 && seen.records[0] == 12) ||
          (strcmp(seen.ids[1], "chat:telegram:42") == 0 && seen.records[1] == 12));

    OK(clawmem_gate(&store_a, "chat:telegram:42", &blocked, warning, sizeof warning, &len));
    CHECK(!blocked && len == 0 && warning[0] == 0);
    OK(clawmem_gate(&store_a, NULL, &blocked, NULL, 0, NULL));
    CHECK(!blocked);

    /* Compaction by hand keeps the last turn after the summary. */
    {
        clawmem_record_t summary = rec(CLAWMEM_RECORD_USER, "{\"role\":\"user\",\"content\":\"summary\"}");
        bool compacted = false;
        OK(clawmem_compact_with_summary(&store_a, "cli:default", 1, &summary, &compacted));
        CHECK_RC(clawmem_compact_with_summary(&store_a, "cli:default", 1, NULL, &compacted),
                 CLAWMEM_ERR_INVALID);
    }

    /* Remount on the same flash: everything is there. */
    OK(clawmem_unmount(&store_a));
    OK(clawmem_mount(&store_b, &cf, &c, CLAWMEM_MOUNT_EXISTING));
    expect_history(&store_b, "chat:telegram:42", 3);
    {
        clawmem_mount_report_t m;
        clawmem_space_t sp;
        uint32_t checked = 0;
        clawmem_maintenance_t mt;
        OK(clawmem_mount_report(&store_b, &m));
        CHECK(m.sector_headers == 32 && !m.sealed_head && !m.resumed_head);
        OK(clawmem_space(&store_b, &sp));
        CHECK(sp.sectors == 32 && sp.sector_bytes == 4096 && sp.used_sectors >= 1);
        OK(clawmem_check(&store_b, &checked));
        CHECK(checked > 0);
        OK(clawmem_maintain(&store_b, 8, &mt));
        CHECK(mt.steps <= 8);
    }

    OK(clawmem_session_delete(&store_b, "cli:default"));
    CHECK_RC(clawmem_session_delete(&store_b, "cli:default"), CLAWMEM_ERR_NOT_FOUND);
    OK(clawmem_sessions_clear(&store_b, &n));
    CHECK(n == 1);
    OK(clawmem_session_list(&store_b, NULL, NULL, &n));
    CHECK(n == 0);
    CHECK(f.violations == 0);
    ramflash_free(&f);
}

/* A session over its limit is blocked, and the gate gives ESP-Claw's warning. */
static void test_blocked_session(void) {
    ramflash f;
    clawmem_flash_t cf;
    clawmem_config_t c = small_config();
    static char big[6000];
    clawmem_record_t r[2];
    clawmem_appended_t a;
    bool blocked = false;
    char warning[512];
    size_t len = 0;
    int k;
    CHECK(ramflash_init(&f, 32, 4096, 4, true));
    cf = ramflash_as_clawmem(&f);
    c.session_size_limit_bytes = 4096;
    OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK));
    memset(big, 'x', sizeof big - 1);
    memcpy(big, "{\"c\":\"", 6);
    memcpy(big + sizeof big - 3, "\"}", 3);
    r[0] = rec(CLAWMEM_RECORD_USER, "{\"role\":\"user\",\"content\":\"go\"}");
    r[1] = rec(CLAWMEM_RECORD_ASSISTANT_FINAL, big);
    OK(clawmem_append(&store_a, "s", r, 2, true, &a));
    CHECK(a.blocked);
    OK(clawmem_gate(&store_a, "s", &blocked, warning, sizeof warning, &len));
    CHECK(blocked && len == strlen(warning) && strstr(warning, "/session new") != NULL);
    /* Too small for the warning: the size needed, with its NUL. */
    {
        char tiny[8];
        size_t need = 0;
        CHECK_RC(clawmem_gate(&store_a, "s", &blocked, tiny, sizeof tiny, &need),
                 CLAWMEM_ERR_BUFFER_TOO_SMALL);
        CHECK(need == len + 1 && tiny[7] == 0);
    }
    k = clawmem_append(&store_a, "s", r, 1, false, NULL);
    CHECK_RC(k, CLAWMEM_ERR_BLOCKED);
    ramflash_free(&f);
}

/* ---- chats ----------------------------------------------------------------- */

static void test_chat_commands(void) {
    ramflash f;
    clawmem_flash_t cf;
    clawmem_config_t c = small_config();
    char id[300], reply[1024];
    size_t len = 0;
    bool handled = false;
    CHECK(ramflash_init(&f, 32, 4096, 4, true));
    cf = ramflash_as_clawmem(&f);
    OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK));

    OK(clawmem_chat_session(&store_a, "telegram", "42", id, sizeof id, &len));
    CHECK(len == strlen(id) && len > 0);
    OK(clawmem_session_command(&store_a, "telegram", "42", "hello there", &handled, reply,
                               sizeof reply, &len));
    CHECK(!handled && len == 0);
    OK(clawmem_session_command(&store_a, "telegram", "42", "/session new work", &handled, reply,
                               sizeof reply, &len));
    CHECK(handled && strcmp(reply, "Started a new session: work") == 0);
    {
        char id2[300];
        OK(clawmem_chat_session(&store_a, "telegram", "42", id2, sizeof id2, NULL));
        CHECK(strcmp(id, id2) != 0 && strstr(id2, "work") != NULL);
    }
    OK(clawmem_session_command(&store_a, "telegram", "42", "/session list", &handled, reply,
                               sizeof reply, &len));
    CHECK(handled && strstr(reply, "work") != NULL);
    OK(clawmem_session_command(&store_a, "telegram", "42", "/session delete work", &handled,
                               reply, sizeof reply, &len));
    CHECK(handled && strstr(reply, "Cannot delete the current session") != NULL);
    OK(clawmem_session_command(&store_a, "telegram", "42", "/session frobnicate", &handled,
                               reply, sizeof reply, &len));
    CHECK(handled && len > 0);
    CHECK_RC(clawmem_chat_session(&store_a, "", "42", id, sizeof id, &len), CLAWMEM_ERR_INVALID);
    CHECK_RC(clawmem_chat_session(&store_a, "telegram", NULL, id, sizeof id, &len),
             CLAWMEM_ERR_INVALID);
    ramflash_free(&f);
}

/* ---- profiles --------------------------------------------------------------- */

static void test_profiles(void) {
    ramflash f;
    clawmem_flash_t cf;
    clawmem_config_t c = small_config();
    const char *soul = "# Soul\nHelpful, brief, honest.\n";
    char buf[256];
    size_t len = 0;
    bool written = false;
    CHECK(ramflash_init(&f, 32, 4096, 4, true));
    cf = ramflash_as_clawmem(&f);
    OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK));
    OK(clawmem_profile_write_if_absent(&store_a, CLAWMEM_PROFILE_SOUL, soul, strlen(soul), &written));
    CHECK(written);
    OK(clawmem_profile_write_if_absent(&store_a, CLAWMEM_PROFILE_SOUL, "x", 1, &written));
    CHECK(!written);
    OK(clawmem_profile_read(&store_a, CLAWMEM_PROFILE_SOUL, buf, sizeof buf, &len));
    CHECK(len == strlen(soul) && strcmp(buf, soul) == 0);
    {
        char tiny[4];
        CHECK_RC(clawmem_profile_read(&store_a, CLAWMEM_PROFILE_SOUL, tiny, sizeof tiny, &len),
                 CLAWMEM_ERR_BUFFER_TOO_SMALL);
        CHECK(len == strlen(soul) + 1);
    }
    /* A document never written reads as its default, which is then stored. */
    OK(clawmem_profile_read(&store_a, CLAWMEM_PROFILE_IDENTITY, buf, sizeof buf, &len));
    CHECK(len > 0 && len == strlen(buf));
    OK(clawmem_profile_write_if_absent(&store_a, CLAWMEM_PROFILE_IDENTITY, "x", 1, &written));
    CHECK(!written);
    OK(clawmem_profile_write(&store_a, CLAWMEM_PROFILE_USER, "Name: Ada", 9));
    OK(clawmem_profile_read(&store_a, CLAWMEM_PROFILE_USER, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "Name: Ada") == 0);
    ramflash_free(&f);
}

/* ---- memory ------------------------------------------------------------------ */

typedef struct {
    int count;
    uint32_t ids[16];
    char content[16][128];
} items_seen;

static void on_item(void *ctx, const clawmem_item_t *item) {
    items_seen *s = (items_seen *)ctx;
    if (s->count < 16 && item->content_len < 128) {
        s->ids[s->count] = item->id;
        memcpy(s->content[s->count], item->content, item->content_len);
        s->content[s->count][item->content_len] = 0;
    }
    s->count++;
}

/* A callback that calls back into the store it was called from. */
static int reentry_rc = 0;
static void reenter(void *ctx, const clawmem_item_t *item) {
    size_t n = 0;
    (void)item;
    reentry_rc = clawmem_memory_count((clawmem_store_t *)ctx, &n);
}

static clawmem_item_input_t input(const char *content, const char *tags) {
    clawmem_item_input_t in;
    memset(&in, 0, sizeof in);
    in.content = content;
    in.tags = tags;
    return in;
}

static void test_memory(bool multiwrite) {
    ramflash f;
    clawmem_flash_t cf;
    clawmem_config_t c = small_config();
    clawmem_item_input_t in;
    clawmem_stored_t st;
    items_seen seen;
    size_t n = 0, len = 0, items = 0;
    uint32_t id1, id2, newest = 0, parsed = 0;
    bool updated = false, invalid = true;
    static char text[8192];
    const char *labels[1];
    CHECK(ramflash_init(&f, 32, 4096, 4, multiwrite));
    cf = ramflash_as_clawmem(&f);
    OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK));

    OK(clawmem_memory_stage_begin(&store_a));
    in = input("User prefers tea over coffee", "preferences");
    OK(clawmem_memory_store(&store_a, &in, 100, false, &st));
    CHECK(st.changed);
    id1 = st.id;
    OK(clawmem_memory_store(&store_a, &in, 101, false, &st));
    CHECK(!st.changed && st.id == id1);
    in = input("Dentist appointment on Friday", "calendar");
    OK(clawmem_memory_store(&store_a, &in, 102, false, &st));
    id2 = st.id;
    in = input("   ", "x");
    CHECK_RC(clawmem_memory_store(&store_a, &in, 103, false, &st), CLAWMEM_ERR_INVALID);

    OK(clawmem_memory_count(&store_a, &n));
    CHECK(n == 2);
    memset(&seen, 0, sizeof seen);
    OK(clawmem_memory_list(&store_a, on_item, &seen, &n));
    /* Priority order: the newer item first (same access count). */
    CHECK(n == 2 && seen.count == 2 && seen.ids[0] == id2 && seen.ids[1] == id1);
    CHECK(strcmp(seen.content[1], "User prefers tea over coffee") == 0);

    /* A callback may not call into the store that is calling it. */
    OK(clawmem_memory_list(&store_a, reenter, &store_a, &n));
    CHECK(n == 2 && reentry_rc == CLAWMEM_ERR_INVALID);
    OK(clawmem_last_error(&store_a, text, sizeof text, NULL));
    CHECK(strstr(text, "inside a callback") != NULL);
    OK(clawmem_memory_count(&store_a, &n));
    CHECK(n == 2);

    memset(&seen, 0, sizeof seen);
    OK(clawmem_memory_get(&store_a, id2, on_item, &seen));
    CHECK(seen.count == 1 && strcmp(seen.content[0], "Dentist appointment on Friday") == 0);
    CHECK_RC(clawmem_memory_get(&store_a, 999, on_item, &seen), CLAWMEM_ERR_NOT_FOUND);

    labels[0] = "calendar";
    memset(&seen, 0, sizeof seen);
    OK(clawmem_memory_recall(&store_a, labels, 1, 5, 110, on_item, &seen, &n));
    CHECK(n == 1 && seen.ids[0] == id2);
    labels[0] = "nosuchlabel";
    CHECK_RC(clawmem_memory_recall(&store_a, labels, 1, 5, 110, on_item, &seen, &n),
             CLAWMEM_ERR_UNKNOWN_LABEL);
    OK(clawmem_last_error(&store_a, text, sizeof text, NULL));
    CHECK(strstr(text, "nosuchlabel") != NULL);
    CHECK_RC(clawmem_memory_recall(&store_a, NULL, 1, 5, 110, on_item, &seen, &n),
             CLAWMEM_ERR_INVALID);

    OK(clawmem_memory_recall_json(&store_a, labels, 1, 5, 111, text, sizeof text, &len, &items,
                                  &invalid));
    CHECK(invalid && items == 0 && strstr(text, "nosuchlabel") != NULL);
    labels[0] = "preferences";
    OK(clawmem_memory_recall_json(&store_a, labels, 1, 5, 111, text, sizeof text, &len, &items,
                                  &invalid));
    CHECK(!invalid && items == 1 && strstr(text, "tea over coffee") != NULL);
    CHECK(len == strlen(text));
    OK(clawmem_memory_list_json(&store_a, text, sizeof text, &len, &items));
    CHECK(items == 2 && strstr(text, "Dentist") != NULL && text[0] == '{');
    {
        char tiny[10];
        size_t need = 0;
        CHECK_RC(clawmem_memory_list_json(&store_a, tiny, sizeof tiny, &need, &items),
                 CLAWMEM_ERR_BUFFER_TOO_SMALL);
        CHECK(need == len + 1);
        /* The message itself does not fit: the size it needs, and the
         * store's last error is left as it was. */
        CHECK_RC(clawmem_last_error(&store_a, tiny, sizeof tiny, &need),
                 CLAWMEM_ERR_BUFFER_TOO_SMALL);
        CHECK(need > sizeof tiny);
        OK(clawmem_last_error(&store_a, text, sizeof text, NULL));
        CHECK(strstr(text, "buffer too small") != NULL);
    }

    OK(clawmem_memory_prompt(&store_a, text, sizeof text, &len));
    CHECK(strstr(text, "preferences") != NULL && strstr(text, "calendar") != NULL);
    OK(clawmem_memory_md(&store_a, text, sizeof text, &len));
    CHECK(strstr(text, "tea over coffee") != NULL);
    OK(clawmem_memory_stage_note(&store_a, text, sizeof text, &len));
    CHECK(len > 0 && strstr(text, "preferences") != NULL);

    in = input("User prefers green tea", NULL);
    OK(clawmem_memory_update(&store_a, id1, &in, 120, &st, &updated));
    CHECK(updated && st.id != id1);
    OK(clawmem_memory_newest(&store_a, id1, &newest));
    CHECK(newest == st.id);
    CHECK_RC(clawmem_memory_update(&store_a, 999, &in, 120, &st, &updated), CLAWMEM_ERR_NOT_FOUND);

    OK(clawmem_item_id_parse("mem-42", &parsed));
    CHECK(parsed == 42);
    CHECK_RC(clawmem_item_id_parse("mem-042", &parsed), CLAWMEM_ERR_INVALID);
    CHECK_RC(clawmem_item_id_parse(NULL, &parsed), CLAWMEM_ERR_INVALID);

    OK(clawmem_memory_forget(&store_a, id2));
    CHECK_RC(clawmem_memory_forget(&store_a, id2), CLAWMEM_ERR_NOT_FOUND);
    if (multiwrite) {
        OK(clawmem_memory_forget_scrub(&store_a, newest));
    } else {
        CHECK_RC(clawmem_memory_forget_scrub(&store_a, newest), CLAWMEM_ERR_UNSUPPORTED);
        OK(clawmem_memory_forget(&store_a, newest));
    }
    OK(clawmem_memory_count(&store_a, &n));
    CHECK(n == 0);
    in = input("Cat is called Miso", "pets");
    OK(clawmem_memory_store(&store_a, &in, 130, false, &st));
    OK(clawmem_memory_compact(&store_a));
    OK(clawmem_memory_count(&store_a, &n));
    CHECK(n == 1);

    /* Survives a remount. */
    OK(clawmem_unmount(&store_a));
    OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_EXISTING));
    memset(&seen, 0, sizeof seen);
    OK(clawmem_memory_list(&store_a, on_item, &seen, &n));
    CHECK(n == 1 && strcmp(seen.content[0], "Cat is called Miso") == 0);
    OK(clawmem_memory_clear(&store_a));
    OK(clawmem_memory_count(&store_a, &n));
    CHECK(n == 0);
    CHECK(f.violations == 0);
    ramflash_free(&f);
}

/* ---- power loss --------------------------------------------------------------- */

/*
 * The workload: turns go to sessions of TURNS_PER_SESSION turns each, and
 * a session is deleted once LIVE newer ones exist, so that the ring of a
 * 64 KiB partition wraps and collection runs.
 */
#define CUT_OPS 300
#define TURNS_PER_SESSION 10
#define LIVE 3
#define SESSIONS (CUT_OPS / TURNS_PER_SESSION)

static void session_name(char *out, int k) {
    sprintf(out, "chat:cut:%d", k);
}

/* Op i of the workload on `s`; `*deleted` is the session it deleted or -1. */
static int workload_op(clawmem_store_t *s, int i, int *deleted) {
    char name[32];
    int rc;
    *deleted = -1;
    if (i % (TURNS_PER_SESSION + 1) == TURNS_PER_SESSION) {
        int k = i / (TURNS_PER_SESSION + 1) - LIVE;
        if (k < 0) {
            return CLAWMEM_OK;
        }
        session_name(name, k);
        *deleted = k;
        return clawmem_session_delete(s, name);
    }
    session_name(name, i / (TURNS_PER_SESSION + 1));
    append_turn(s, name, &rc);
    return rc;
}

/* Turns of session k that op i (when done) leaves, and whether it deletes k. */
static void model_after(int ops, int *turns, bool *gone) {
    int i;
    memset(turns, 0, sizeof(int) * SESSIONS);
    memset(gone, 0, sizeof(bool) * SESSIONS);
    for (i = 0; i < ops; i++) {
        if (i % (TURNS_PER_SESSION + 1) == TURNS_PER_SESSION) {
            int k = i / (TURNS_PER_SESSION + 1) - LIVE;
            if (k >= 0) {
                gone[k] = true;
            }
        } else {
            turns[i / (TURNS_PER_SESSION + 1)]++;
        }
    }
}

/* Whether the fresh store `s` shows exactly the state after `ops` ops. */
static bool matches(clawmem_store_t *s, int ops) {
    int turns[SESSIONS];
    bool gone[SESSIONS];
    int k;
    model_after(ops, turns, gone);
    for (k = 0; k < SESSIONS; k++) {
        char name[32];
        clawmem_session_info_t info;
        int rc;
        session_name(name, k);
        rc = clawmem_session_info(s, name, &info);
        if (gone[k] || turns[k] == 0) {
            if (rc != CLAWMEM_ERR_NOT_FOUND) {
                return false;
            }
        } else if (rc != CLAWMEM_OK || info.records != (uint32_t)(4 * turns[k]) ||
                   !history_is(s, name, turns[k])) {
            return false;
        }
    }
    return true;
}

/*
 * Cuts power at every mutating flash call of the workload (the call at the
 * cut is torn), then mounts a fresh store on the flash: it must show every
 * acknowledged op, and the op that was cut either whole or not at all, and
 * take writes again.
 */
static void test_power_cuts(void) {
    long cut, points = -1;
    unsigned long progs = 0, erases = 0;
    for (cut = 0;; cut++) {
        ramflash f;
        clawmem_flash_t cf;
        clawmem_config_t c = small_config();
        int acked = 0, i, rc = CLAWMEM_OK, deleted;
        CHECK(ramflash_init(&f, 16, 4096, 4, false));
        cf = ramflash_as_clawmem(&f);
        OK(clawmem_format(&store_a, &cf, &c));
        f.progs = f.erases = 0;
        f.cut_after = cut;
        for (i = 0; i < CUT_OPS; i++) {
            rc = workload_op(&store_a, i, &deleted);
            if (rc != CLAWMEM_OK) {
                break;
            }
            acked++;
        }
        if (!f.dead) {
            /* The workload ended before the cut point: every point was cut. */
            CHECK(acked == CUT_OPS);
            points = cut;
            progs = f.progs;
            erases = f.erases;
            ramflash_free(&f);
            break;
        }
        CHECK_RC(rc, CLAWMEM_ERR_FLASH);
        ramflash_power_on(&f);
        OK(clawmem_mount(&store_b, &cf, &c, CLAWMEM_MOUNT_EXISTING));
        if (!matches(&store_b, acked) && !matches(&store_b, acked + 1)) {
            fprintf(stderr, "cut %ld: the fresh mount lost acknowledged ops (%d acked)\n", cut, acked);
            failures++;
            return;
        }
        /* The recovered store takes the rest of the workload. */
        {
            int from = matches(&store_b, acked + 1) ? acked + 1 : acked;
            for (i = from; i < CUT_OPS; i++) {
                OK(workload_op(&store_b, i, &deleted));
            }
            CHECK(matches(&store_b, CUT_OPS));
            /* And what the recovered store wrote survives the next boot. */
            OK(clawmem_unmount(&store_b));
            OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_EXISTING));
            CHECK(matches(&store_a, CUT_OPS));
            OK(clawmem_unmount(&store_a));
        }
        CHECK(f.violations == 0);
        ramflash_free(&f);
    }
    /* Every mutating call was cut once, and the ring wrapped: more was
     * written than the partition holds. */
    CHECK(points > 500 && (unsigned long)points == progs + erases);
    CHECK(erases > 16);
    printf("power cuts: %ld cut points (%lu progs, %lu erases uncut), each recovered by a fresh mount\n",
           points, progs, erases);
}

/*
 * ESP32 flash encryption's rules: 16-byte program units, each written once
 * between erases, and (here) 16-byte aligned reads, which the adapter
 * serves through its bounce buffer.
 */
static void test_coarse_units(void) {
    ramflash f;
    clawmem_flash_t cf;
    clawmem_config_t c = small_config();
    int t, rc;
    CHECK(ramflash_init(&f, 32, 4096, 16, false));
    f.read_size = 16;
    cf = ramflash_as_clawmem(&f);
    OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK));
    for (t = 0; t < 20; t++) {
        append_turn(&store_a, "enc", &rc);
        OK(rc);
    }
    OK(clawmem_unmount(&store_a));
    OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_EXISTING));
    CHECK(history_is(&store_a, "enc", 20));
    CHECK(f.violations == 0 && f.reads > 0);
    /* A read size that is not a power of two is refused. */
    cf.read_size = 3;
    CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_EXISTING), CLAWMEM_ERR_CONFIG);
    /* The store was written with 16-byte units and 4 KiB sectors: a mount
     * that gives other sizes is refused, and writes nothing. */
    {
        char msg[256];
        unsigned long progs = f.progs, erases = f.erases;
        cf = ramflash_as_clawmem(&f);
        cf.prog_size = 32;
        CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_FORMAT_IF_BLANK), CLAWMEM_ERR_CONFIG);
        OK(clawmem_last_error(&store_a, msg, sizeof msg, NULL));
        CHECK(strstr(msg, "4096 B sectors and a 16 B write unit") != NULL);
        cf = ramflash_as_clawmem(&f);
        cf.erase_size = 8192;
        cf.sector_count = 16;
        CHECK_RC(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_EXISTING), CLAWMEM_ERR_CONFIG);
        CHECK(f.progs == progs && f.erases == erases);
        cf = ramflash_as_clawmem(&f);
        OK(clawmem_mount(&store_a, &cf, &c, CLAWMEM_MOUNT_EXISTING));
        CHECK(history_is(&store_a, "enc", 20));
        OK(clawmem_unmount(&store_a));
    }
    ramflash_free(&f);
}

int main(void) {
    test_bad_arguments();
    test_sessions();
    test_blocked_session();
    test_chat_commands();
    test_profiles();
    test_memory(true);
    test_memory(false);
    test_coarse_units();
    test_power_cuts();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("clawmem C API: all checks passed\n");
    return 0;
}
