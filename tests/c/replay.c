/*
 * c-replay: replays an agent trace (traces/FORMAT.md) through clawmem.h only,
 * on a RAM flash with ESP32's geometry that enforces NOR rules, and checks
 * every history read against a model of what the store must hold: the
 * records appended since the session's last delete, less what ESP-Claw's
 * turn-aware compaction drops when an append reports it. The proof that a C
 * client can drive the whole workload; scripts/c-replay.sh builds and runs
 * it, and with --check compares its figures with `clawmem-sim replay`'s.
 *
 * Usage: c-replay TRACE [SIZE_BYTES]
 * Its last line of output is one JSON object; it exits 1 on a mismatch or
 * an error, 2 on a bad trace or bad arguments.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clawmem.h"
#include "ramflash.h"

/* ---- the model ---------------------------------------------------------- */

typedef struct {
    uint8_t type, format;
    char *body;
    size_t len;
} mrec;

typedef struct {
    char *id;
    mrec *recs;
    size_t n, cap;
} msession;

static msession *sessions;
static size_t n_sessions, cap_sessions;

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "c-replay: out of memory\n");
        exit(2);
    }
    return q;
}

static char *xstrndup(const char *s, size_t n) {
    char *d = (char *)xrealloc(NULL, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static msession *find_session(const char *id, int create) {
    size_t i;
    for (i = 0; i < n_sessions; i++) {
        if (strcmp(sessions[i].id, id) == 0) {
            return &sessions[i];
        }
    }
    if (!create) {
        return NULL;
    }
    if (n_sessions == cap_sessions) {
        cap_sessions = cap_sessions ? 2 * cap_sessions : 64;
        sessions = (msession *)xrealloc(sessions, cap_sessions * sizeof *sessions);
    }
    memset(&sessions[n_sessions], 0, sizeof sessions[0]);
    sessions[n_sessions].id = xstrndup(id, strlen(id));
    return &sessions[n_sessions++];
}

static void drop_session(const char *id) {
    msession *s = find_session(id, 0);
    size_t i;
    if (!s) {
        return;
    }
    for (i = 0; i < s->n; i++) {
        free(s->recs[i].body);
    }
    free(s->recs);
    free(s->id);
    *s = sessions[--n_sessions];
}

static int is_tool(uint8_t t) {
    return t == CLAWMEM_RECORD_ASSISTANT_TOOL || t == CLAWMEM_RECORD_TOOL_RESULT;
}

/*
 * ESP-Claw's turn-aware compaction (session_history_plan_compaction in
 * claw_memory_session.c), written here from its rule, not from clawmem's
 * code: a turn starts at record 0 and at each later user record; every
 * user and final answer is kept, every record of an incomplete last turn,
 * and the tool records of only the newest completed turn that has tools.
 */
static void compact_model(msession *s) {
    size_t i, k = 0, turns = 0;
    size_t *turn_of = (size_t *)xrealloc(NULL, (s->n + 1) * sizeof(size_t));
    long keep_tools = -1;
    int last_incomplete = 0;
    for (i = 0; i < s->n; i++) {
        if (i > 0 && s->recs[i].type == CLAWMEM_RECORD_USER) {
            turns++;
        }
        turn_of[i] = turns;
    }
    if (s->n > 0) {
        size_t t;
        for (t = 0; t <= turns; t++) {
            int completed = 0, tools = 0;
            for (i = 0; i < s->n; i++) {
                if (turn_of[i] != t) {
                    continue;
                }
                completed |= s->recs[i].type == CLAWMEM_RECORD_ASSISTANT_FINAL;
                tools |= is_tool(s->recs[i].type);
            }
            if (completed && tools) {
                keep_tools = (long)t;
            }
            if (t == turns) {
                last_incomplete = !completed;
            }
        }
    }
    for (i = 0; i < s->n; i++) {
        mrec r = s->recs[i];
        int keep = !is_tool(r.type) || (long)turn_of[i] == keep_tools ||
                   (last_incomplete && turn_of[i] == turns);
        if (keep) {
            s->recs[k++] = r;
        } else {
            free(r.body);
        }
    }
    s->n = k;
    free(turn_of);
}

/* ---- the tally ---------------------------------------------------------- */

static unsigned long ops, turns_done, history_checks, history_mismatches, errors, blocked,
    compactions, skipped, user_bytes;
static char first_error[512], first_mismatch[512];
static long line_no;

static void failed(const char *op, clawmem_store_t *st, int rc) {
    errors++;
    if (!first_error[0]) {
        char why[256] = "";
        clawmem_last_error(st, why, sizeof why, NULL);
        snprintf(first_error, sizeof first_error, "line %ld %s: %s (%s)", line_no, op,
                 clawmem_strerror(rc), why);
    }
}

/* ---- trace fields ------------------------------------------------------- */

static int record_type(const char *s) {
    if (!strcmp(s, "user")) return CLAWMEM_RECORD_USER;
    if (!strcmp(s, "assistant_final")) return CLAWMEM_RECORD_ASSISTANT_FINAL;
    if (!strcmp(s, "assistant_tool")) return CLAWMEM_RECORD_ASSISTANT_TOOL;
    if (!strcmp(s, "tool_result")) return CLAWMEM_RECORD_TOOL_RESULT;
    return -1;
}

static int record_format(const char *s) {
    if (!strcmp(s, "unknown")) return CLAWMEM_FORMAT_UNKNOWN;
    if (!strcmp(s, "openai")) return CLAWMEM_FORMAT_OPENAI;
    if (!strcmp(s, "anthropic")) return CLAWMEM_FORMAT_ANTHROPIC;
    if (!strcmp(s, "openai_responses")) return CLAWMEM_FORMAT_OPENAI_RESPONSES;
    return -1;
}

static int profile_doc(const char *s) {
    if (!strcmp(s, "soul")) return CLAWMEM_PROFILE_SOUL;
    if (!strcmp(s, "identity")) return CLAWMEM_PROFILE_IDENTITY;
    if (!strcmp(s, "user")) return CLAWMEM_PROFILE_USER;
    if (!strcmp(s, "agents")) return CLAWMEM_PROFILE_AGENTS;
    return -1;
}

static void bad_trace(const char *what) {
    fprintf(stderr, "c-replay: line %ld: %s\n", line_no, what);
    exit(2);
}

static const char *str_field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsString(v)) {
        char msg[96];
        snprintf(msg, sizeof msg, "field \"%s\" must be a string", name);
        bad_trace(msg);
    }
    return v->valuestring;
}

/* The strings of array `name`, joined with ","; NULL if absent and optional. */
static char *joined(const cJSON *o, const char *name, int optional) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, name), *v;
    size_t len = 0;
    char *out;
    if (!a && optional) {
        return NULL;
    }
    if (!cJSON_IsArray(a)) {
        bad_trace("a tags or keywords field must be an array of strings");
    }
    cJSON_ArrayForEach(v, a) {
        if (!cJSON_IsString(v)) bad_trace("a tags or keywords field must be an array of strings");
        len += strlen(v->valuestring) + 1;
    }
    out = (char *)xrealloc(NULL, len + 1);
    out[0] = 0;
    cJSON_ArrayForEach(v, a) {
        if (out[0]) strcat(out, ",");
        strcat(out, v->valuestring);
    }
    return out;
}

/* ---- memory targets ----------------------------------------------------- */

enum { T_LIVE, T_FAILED, T_GONE };
typedef struct {
    int state;
    uint32_t id;
} target;
static target *targets;
static size_t n_targets, cap_targets;
static uint32_t clock_s;

/* The replayer's clock: a minute per memory call, as clawmem-sim's. */
static uint32_t tick(void) {
    clock_s += 60;
    return 1700000000u + clock_s;
}

static int live_target(const cJSON *o, uint32_t *id) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "target");
    size_t k;
    if (!cJSON_IsNumber(t) || t->valuedouble < 0) bad_trace("target must be a number");
    k = (size_t)t->valuedouble;
    if (k >= n_targets || targets[k].state != T_LIVE) {
        skipped++;
        return 0;
    }
    *id = targets[k].id;
    return 1;
}

static void retarget(uint32_t id, int state, uint32_t now_id) {
    size_t k;
    for (k = 0; k < n_targets; k++) {
        if (targets[k].state == T_LIVE && targets[k].id == id) {
            targets[k].state = state;
            targets[k].id = now_id;
        }
    }
}

/* ---- operations --------------------------------------------------------- */

static clawmem_store_t store;
static ramflash flash;
static clawmem_flash_t cflash;
static uint8_t *hbuf;
static size_t hcap = 64 * 1024;

static void op_append(const cJSON *o) {
    const char *session = str_field(o, "session");
    const cJSON *recs = cJSON_GetObjectItemCaseSensitive(o, "records"), *r;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(o, "turn_completed");
    clawmem_record_t batch[64];
    clawmem_appended_t out;
    size_t n = 0, i, bytes = 0;
    int rc;
    if (!cJSON_IsArray(recs) || !cJSON_IsBool(tc)) bad_trace("append needs records and turn_completed");
    cJSON_ArrayForEach(r, recs) {
        int t = record_type(str_field(r, "type")), f = record_format(str_field(r, "format"));
        const char *body = str_field(r, "body");
        if (t < 0 || f < 0) bad_trace("unknown record type or format");
        if (n == 64) bad_trace("a batch of more than 64 records");
        batch[n].type_ = (uint8_t)t;
        batch[n].format = (uint8_t)f;
        batch[n].body = (const uint8_t *)body;
        batch[n].body_len = strlen(body);
        bytes += batch[n].body_len;
        n++;
    }
    if (cJSON_IsTrue(tc)) turns_done++;
    rc = clawmem_append(&store, session, batch, n, cJSON_IsTrue(tc), &out);
    if (rc == CLAWMEM_OK) {
        msession *s = find_session(session, 1);
        user_bytes += bytes;
        for (i = 0; i < n; i++) {
            if (s->n == s->cap) {
                s->cap = s->cap ? 2 * s->cap : 16;
                s->recs = (mrec *)xrealloc(s->recs, s->cap * sizeof(mrec));
            }
            s->recs[s->n].type = batch[i].type_;
            s->recs[s->n].format = batch[i].format;
            s->recs[s->n].body = xstrndup((const char *)batch[i].body, batch[i].body_len);
            s->recs[s->n].len = batch[i].body_len;
            s->n++;
        }
        if (out.compacted) {
            compactions++;
            compact_model(s);
        }
    } else if (rc == CLAWMEM_ERR_BLOCKED) {
        /* As the warning asks: delete the session and go on. */
        blocked++;
        drop_session(session);
        rc = clawmem_session_delete(&store, session);
        if (rc != CLAWMEM_OK && rc != CLAWMEM_ERR_NOT_FOUND) failed("session_delete", &store, rc);
    } else {
        failed("append", &store, rc);
    }
}

static void op_history(const cJSON *o) {
    const char *session = str_field(o, "session");
    clawmem_history_t h;
    clawmem_record_t r;
    size_t cursor = 0, k = 0;
    msession *s;
    int rc;
    for (;;) {
        rc = clawmem_history(&store, session, CLAWMEM_FORMAT_UNKNOWN, hbuf, hcap, &h);
        if (rc != CLAWMEM_ERR_BUFFER_TOO_SMALL) break;
        if (h.needed_bytes <= hcap) {
            failed("history (a buffer of the size asked for was refused)", &store, rc);
            return;
        }
        hcap = h.needed_bytes;
        hbuf = (uint8_t *)xrealloc(hbuf, hcap);
    }
    if (rc == CLAWMEM_ERR_NOT_FOUND) {
        h.used_bytes = 0;
        h.records = 0;
    } else if (rc != CLAWMEM_OK) {
        failed("history", &store, rc);
        return;
    }
    history_checks++;
    s = find_session(session, 0);
    while (rc == CLAWMEM_OK && clawmem_history_next(&h, &cursor, &r) == 1) {
        const mrec *w = s && k < s->n ? &s->recs[k] : NULL;
        if (!w || w->type != r.type_ || w->format != r.format || w->len != r.body_len ||
            memcmp(w->body, r.body, r.body_len) != 0) {
            break;
        }
        k++;
    }
    if (k != h.records || k != (s ? s->n : 0)) {
        history_mismatches++;
        if (!first_mismatch[0]) {
            snprintf(first_mismatch, sizeof first_mismatch,
                     "line %ld %s: record %zu differs (expected %zu records, got %u)", line_no,
                     session, k, s ? s->n : 0, h.records);
        }
    }
}

static void op_memory_store(const cJSON *o) {
    char *tags = joined(o, "tags", 0), *keywords = joined(o, "keywords", 0);
    const char *content = str_field(o, "content");
    clawmem_item_input_t in;
    clawmem_stored_t st;
    int rc;
    in.content = content;
    in.tags = tags;
    in.keywords = keywords;
    in.source = str_field(o, "source");
    rc = clawmem_memory_store(&store, &in, tick(), false, &st);
    if (n_targets == cap_targets) {
        cap_targets = cap_targets ? 2 * cap_targets : 64;
        targets = (target *)xrealloc(targets, cap_targets * sizeof(target));
    }
    if (rc == CLAWMEM_OK) {
        user_bytes += strlen(content);
        targets[n_targets].state = T_LIVE;
        targets[n_targets].id = st.id;
    } else {
        failed("memory_store", &store, rc);
        targets[n_targets].state = T_FAILED;
    }
    n_targets++;
    free(tags);
    free(keywords);
}

static void op_memory_recall(const cJSON *o) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "labels"), *v;
    const cJSON *limit = cJSON_GetObjectItemCaseSensitive(o, "limit");
    const char *labels[CLAWMEM_RECALL_MAX_LABELS];
    size_t n = 0, got = 0;
    int rc;
    if (!cJSON_IsArray(a) || !cJSON_IsNumber(limit)) bad_trace("memory_recall needs labels and limit");
    cJSON_ArrayForEach(v, a) {
        if (!cJSON_IsString(v) || n == CLAWMEM_RECALL_MAX_LABELS) bad_trace("bad labels");
        labels[n++] = v->valuestring;
    }
    rc = clawmem_memory_recall(&store, labels, n, (size_t)limit->valuedouble, tick(), NULL, NULL, &got);
    if (rc != CLAWMEM_OK) failed("memory_recall", &store, rc);
}

static void op_memory_update(const cJSON *o) {
    uint32_t id, newest;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "content");
    char *tags, *keywords;
    clawmem_item_input_t in;
    clawmem_stored_t st;
    bool updated = false;
    int rc;
    if (!live_target(o, &id)) return;
    tags = joined(o, "tags", 1);
    keywords = joined(o, "keywords", 1);
    memset(&in, 0, sizeof in);
    in.content = cJSON_IsString(c) ? c->valuestring : NULL;
    in.tags = tags;
    in.keywords = keywords;
    rc = clawmem_memory_update(&store, id, &in, tick(), &st, &updated);
    if (rc == CLAWMEM_OK) {
        user_bytes += in.content ? strlen(in.content) : 0;
        newest = updated ? st.id : id;
        retarget(id, T_LIVE, newest);
    } else if (rc == CLAWMEM_ERR_NOT_FOUND) {
        skipped++;
        retarget(id, T_GONE, 0);
    } else {
        failed("memory_update", &store, rc);
    }
    free(tags);
    free(keywords);
}

static void op_memory_forget(const cJSON *o) {
    uint32_t id;
    int rc;
    if (!live_target(o, &id)) return;
    rc = clawmem_memory_forget(&store, id);
    if (rc == CLAWMEM_OK) {
        retarget(id, T_GONE, 0);
    } else if (rc == CLAWMEM_ERR_NOT_FOUND) {
        skipped++;
        retarget(id, T_GONE, 0);
    } else {
        failed("memory_forget", &store, rc);
    }
}

static void op_profile_read(const cJSON *o) {
    int doc = profile_doc(str_field(o, "name"));
    static char *buf;
    static size_t cap;
    size_t len = 0;
    int rc;
    if (doc < 0) bad_trace("unknown profile name");
    rc = clawmem_profile_read(&store, (uint8_t)doc, buf, cap, &len);
    if (rc == CLAWMEM_ERR_BUFFER_TOO_SMALL) {
        cap = len;
        buf = (char *)xrealloc(buf, cap);
        rc = clawmem_profile_read(&store, (uint8_t)doc, buf, cap, &len);
    }
    if (rc != CLAWMEM_OK) failed("profile_read", &store, rc);
}

static void replay_line(const cJSON *o) {
    const cJSON *opv = cJSON_GetObjectItemCaseSensitive(o, "op");
    const char *op;
    int rc;
    if (!opv) {
        if (cJSON_GetObjectItemCaseSensitive(o, "trace")) return; /* the header */
        bad_trace("a line without \"op\"");
    }
    if (!cJSON_IsString(opv)) bad_trace("\"op\" must be a string");
    op = opv->valuestring;
    ops++;
    if (!strcmp(op, "append")) {
        op_append(o);
    } else if (!strcmp(op, "history")) {
        op_history(o);
    } else if (!strcmp(op, "session_delete")) {
        const char *session = str_field(o, "session");
        rc = clawmem_session_delete(&store, session);
        if (rc == CLAWMEM_OK || rc == CLAWMEM_ERR_NOT_FOUND) {
            drop_session(session);
        } else {
            failed("session_delete", &store, rc);
        }
    } else if (!strcmp(op, "memory_store")) {
        op_memory_store(o);
    } else if (!strcmp(op, "memory_recall")) {
        op_memory_recall(o);
    } else if (!strcmp(op, "memory_update")) {
        op_memory_update(o);
    } else if (!strcmp(op, "memory_forget")) {
        op_memory_forget(o);
    } else if (!strcmp(op, "memory_list")) {
        size_t n = 0;
        rc = clawmem_memory_list(&store, NULL, NULL, &n);
        if (rc != CLAWMEM_OK) failed("memory_list", &store, rc);
    } else if (!strcmp(op, "profile_write")) {
        int doc = profile_doc(str_field(o, "name"));
        const char *body = str_field(o, "body");
        if (doc < 0) bad_trace("unknown profile name");
        rc = clawmem_profile_write(&store, (uint8_t)doc, body, strlen(body));
        if (rc == CLAWMEM_OK) {
            user_bytes += strlen(body);
        } else {
            failed("profile_write", &store, rc);
        }
    } else if (!strcmp(op, "profile_read")) {
        op_profile_read(o);
    } else if (!strcmp(op, "remount")) {
        rc = clawmem_unmount(&store);
        if (rc == CLAWMEM_OK) rc = clawmem_mount(&store, &cflash, NULL, CLAWMEM_MOUNT_EXISTING);
        if (rc != CLAWMEM_OK) failed("remount", &store, rc);
    } else {
        char msg[128];
        snprintf(msg, sizeof msg, "unknown op \"%.64s\"", op);
        bad_trace(msg);
    }
}

/* A JSON string literal of s (for the report). */
static void json_str(const char *s) {
    if (!s[0]) {
        printf("null");
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

int main(int argc, char **argv) {
    FILE *in;
    char *line = NULL;
    size_t cap = 0;
    long size = 1024L * 1024L;
    int rc;
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: c-replay TRACE [SIZE_BYTES]\n");
        return 2;
    }
    if (argc == 3) {
        char *end;
        size = strtol(argv[2], &end, 10);
        if (*end || size < 4 * 4096 || size % 4096) {
            fprintf(stderr, "c-replay: the size must be a whole number of 4 KiB sectors, at least 4\n");
            return 2;
        }
    }
    in = fopen(argv[1], "r");
    if (!in) {
        perror(argv[1]);
        return 2;
    }
    /* ESP32: 4-byte words that may be programmed again, 4 KiB sectors. */
    if (!ramflash_init(&flash, (uint32_t)(size / 4096), 4096, 4, true)) {
        fprintf(stderr, "c-replay: out of memory\n");
        return 2;
    }
    cflash = ramflash_as_clawmem(&flash);
    hbuf = (uint8_t *)xrealloc(NULL, hcap);
    rc = clawmem_format(&store, &cflash, NULL);
    if (rc != CLAWMEM_OK) {
        char why[256] = "";
        clawmem_last_error(&store, why, sizeof why, NULL);
        fprintf(stderr, "c-replay: format failed: %s\n", why);
        return 2;
    }
    while (getline(&line, &cap, in) > 0) {
        cJSON *o;
        line_no++;
        if (line[0] == '\n' || line[0] == 0) continue;
        o = cJSON_Parse(line);
        if (!o || !cJSON_IsObject(o)) bad_trace("not a JSON object");
        replay_line(o);
        cJSON_Delete(o);
    }
    fclose(in);
    free(line);
    printf("{\"engine\":\"clawmem via clawmem.h\",\"trace\":");
    json_str(argv[1]);
    printf(",\"capacity_bytes\":%ld,\"ops\":%lu,\"turns\":%lu,\"history_checks\":%lu,"
           "\"history_mismatches\":%lu,\"errors\":%lu,\"blocked\":%lu,\"compactions\":%lu,"
           "\"skipped\":%lu,\"user_bytes\":%lu,\"programmed_bytes\":%lu,\"erases\":%lu,"
           "\"nor_violations\":%lu,\"first_error\":",
           size, ops, turns_done, history_checks, history_mismatches, errors, blocked,
           compactions, skipped, user_bytes, flash.prog_bytes, flash.erases, flash.violations);
    json_str(first_error);
    printf(",\"first_mismatch\":");
    json_str(first_mismatch);
    printf("}\n");
    return (history_mismatches || errors || flash.violations) ? 1 : 0;
}
