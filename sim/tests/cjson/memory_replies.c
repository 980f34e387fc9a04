/*
 * The oracle for clawmem's JSON replies of ESP-Claw's memory tools
 * (sim/tests/espclaw_replies.rs): builds each reply with the real cJSON,
 * making the calls ESP-Claw's memory capability makes in the same order
 * (an object per item with its keys in claw_memory_item_to_json's order,
 * the items printed unformatted and parsed again into the reply, the
 * reply printed unformatted), and prints it.
 *
 * Input, on stdin: one JSON object saying what to render.
 *   {"reply":"items","action":"memory_recall","changed":true,"items":[ITEM...]}
 *   {"reply":"write","action":"memory_store","changed":true,
 *    "memory_id":"mem-7","summary":"drinks"}
 *   {"reply":"invalid","invalid_label":"x","available":["a","b"]}
 * where ITEM is {"id","source","content","tags","keywords","created_at",
 * "updated_at","access_count","summary_ids":[..],"summary_labels":[..]}.
 * Output: the reply, no newline. Exit status 2 on bad input.
 *
 * Written for clawmem's tests; no ESP-Claw code is copied here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static const char *str_of(const cJSON *obj, const char *key)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, key));
    return s ? s : "";
}

static double num_of(const cJSON *obj, const char *key)
{
    return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

/* One item, keys in the order ESP-Claw adds them. */
static cJSON *item_object(const cJSON *in)
{
    cJSON *out = cJSON_CreateObject();
    cJSON *ids = cJSON_CreateArray();
    cJSON *labels = cJSON_CreateArray();
    const cJSON *e = NULL;

    cJSON_AddStringToObject(out, "id", str_of(in, "id"));
    cJSON_AddStringToObject(out, "source", str_of(in, "source"));
    cJSON_AddStringToObject(out, "content", str_of(in, "content"));
    cJSON_AddStringToObject(out, "tags", str_of(in, "tags"));
    cJSON_AddStringToObject(out, "keywords", str_of(in, "keywords"));
    cJSON_AddNumberToObject(out, "created_at", num_of(in, "created_at"));
    cJSON_AddNumberToObject(out, "updated_at", num_of(in, "updated_at"));
    cJSON_AddNumberToObject(out, "access_count", num_of(in, "access_count"));
    cJSON_AddBoolToObject(out, "deleted", 0);
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(in, "summary_ids")) {
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(cJSON_GetNumberValue(e)));
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(in, "summary_labels")) {
        cJSON_AddItemToArray(labels, cJSON_CreateString(cJSON_GetStringValue(e)));
    }
    cJSON_AddItemToObject(out, "summary_ids", ids);
    cJSON_AddItemToObject(out, "summary_labels", labels);
    return out;
}

/* A printed value, parsed again: what ESP-Claw's reply embeds. */
static cJSON *reparsed(cJSON *value)
{
    char *text = cJSON_PrintUnformatted(value);
    cJSON *again = cJSON_Parse(text);

    cJSON_Delete(value);
    free(text);
    return again ? again : cJSON_CreateArray();
}

static char *read_all(FILE *f)
{
    size_t cap = 1 << 16, len = 0, n;
    char *buf = malloc(cap);

    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    if (buf) {
        buf[len] = '\0';
    }
    return buf;
}

int main(void)
{
    char *input = read_all(stdin);
    cJSON *in = input ? cJSON_Parse(input) : NULL;
    cJSON *root = cJSON_CreateObject();
    const char *reply = str_of(in, "reply");
    char *out;

    if (!in) {
        fprintf(stderr, "memory_replies: the input is not JSON\n");
        return 2;
    }
    if (strcmp(reply, "items") == 0) {
        cJSON *items = cJSON_CreateArray();
        const cJSON *e = NULL;

        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(in, "items")) {
            cJSON_AddItemToArray(items, item_object(e));
        }
        cJSON_AddBoolToObject(root, "ok", 1);
        cJSON_AddStringToObject(root, "action", str_of(in, "action"));
        cJSON_AddBoolToObject(root, "changed",
                              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "changed")));
        cJSON_AddItemToObject(root, "items", reparsed(items));
    } else if (strcmp(reply, "write") == 0) {
        cJSON_AddBoolToObject(root, "ok", 1);
        cJSON_AddStringToObject(root, "action", str_of(in, "action"));
        cJSON_AddBoolToObject(root, "changed",
                              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "changed")));
        if (str_of(in, "memory_id")[0]) {
            cJSON_AddStringToObject(root, "memory_id", str_of(in, "memory_id"));
        }
        if (str_of(in, "summary")[0]) {
            cJSON_AddStringToObject(root, "summary", str_of(in, "summary"));
        }
    } else if (strcmp(reply, "invalid") == 0) {
        cJSON *catalog = cJSON_CreateArray();
        const cJSON *e = NULL;

        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(in, "available")) {
            cJSON_AddItemToArray(catalog, cJSON_CreateString(cJSON_GetStringValue(e)));
        }
        cJSON_AddBoolToObject(root, "ok", 0);
        cJSON_AddStringToObject(root, "error", "invalid_summary_labels");
        cJSON_AddStringToObject(root, "message",
                                "summary_labels must be copied exactly from the current memory summary label catalog");
        cJSON_AddStringToObject(root, "invalid_label", str_of(in, "invalid_label"));
        cJSON_AddItemToObject(root, "available_summary_labels", reparsed(catalog));
    } else {
        fprintf(stderr, "memory_replies: unknown reply \"%s\"\n", reply);
        return 2;
    }
    out = cJSON_PrintUnformatted(root);
    fputs(out, stdout);
    free(out);
    cJSON_Delete(root);
    cJSON_Delete(in);
    free(input);
    return 0;
}
