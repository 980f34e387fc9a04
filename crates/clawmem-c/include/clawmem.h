/*
 * clawmem.h: the C API of clawmem, an AI agent's memory on raw NOR flash.
 *
 * Generated from crates/clawmem-c/src by cbindgen; do not edit. Regenerate
 * with scripts/c-tests.sh --bless.
 *
 * Every function returns CLAWMEM_OK (0) or a negative clawmem_err, unless
 * its comment says otherwise; clawmem_strerror() names a code and
 * clawmem_last_error() says what was wrong with the last failed call. No
 * function allocates, panics or blocks on anything but the flash callbacks.
 * A store is not thread-safe: serialise calls on one store (ESP-Claw's
 * memory task holds a mutex).
 */

#ifndef CLAWMEM_H
#define CLAWMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Sessions a store keeps in its RAM table.
#define CLAWMEM_MAX_SESSIONS 128

// 64-bit words of a [`clawmem_store_t`] (its size is this times 8).
#define CLAWMEM_STORE_WORDS 2560

// Most labels one recall takes.
#define CLAWMEM_RECALL_MAX_LABELS 16

// clawmem_mount mode: refuse a partition without a store
// (CLAWMEM_ERR_NOT_FORMATTED).
#define CLAWMEM_MOUNT_EXISTING 0

// clawmem_mount mode: format a partition that is entirely erased (never a
// foreign one).
#define CLAWMEM_MOUNT_FORMAT_IF_BLANK 1

// ESP-Claw's record types (`clawmem_record_t.type_`): a user message, which
// starts a turn.
#define CLAWMEM_RECORD_USER 1

// The backend's final assistant message, which completes a turn.
#define CLAWMEM_RECORD_ASSISTANT_FINAL 2

// The backend's assistant message that requests tool calls.
#define CLAWMEM_RECORD_ASSISTANT_TOOL 3

// A JSON array of tool result messages.
#define CLAWMEM_RECORD_TOOL_RESULT 4

// Backend formats (`clawmem_record_t.format`, ESP-Claw's
// `claw_llm_backend_format`): not known, never a mismatch.
#define CLAWMEM_FORMAT_UNKNOWN 0

// `openai_compatible`.
#define CLAWMEM_FORMAT_OPENAI 1

// `anthropic_compatible`.
#define CLAWMEM_FORMAT_ANTHROPIC 2

// `openai_responses`.
#define CLAWMEM_FORMAT_OPENAI_RESPONSES 3

// 64-bit words of a [`clawmem_history_stream_t`].
#define CLAWMEM_HISTORY_STREAM_WORDS 128

// Profile documents: `soul.md`.
#define CLAWMEM_PROFILE_SOUL 0

// `identity.md`.
#define CLAWMEM_PROFILE_IDENTITY 1

// `user.md`.
#define CLAWMEM_PROFILE_USER 2

// `AGENTS.md`.
#define CLAWMEM_PROFILE_AGENTS 3

// Result codes: `CLAWMEM_OK`, or a negative code.
typedef enum {
  // Success.
  CLAWMEM_OK = 0,
  // A bad argument: a NULL pointer, a size of zero, text that is not
  // UTF-8, a misaligned store, an unknown enum value.
  CLAWMEM_ERR_INVALID = -1,
  // A flash callback failed; the operation did not complete.
  CLAWMEM_ERR_FLASH = -2,
  // The partition holds no store (blank or foreign).
  CLAWMEM_ERR_NOT_FORMATTED = -3,
  // The store was written by a newer format than this engine reads.
  CLAWMEM_ERR_VERSION = -4,
  // Stored data failed its checks.
  CLAWMEM_ERR_CORRUPTED = -5,
  // No room, even after collection; delete sessions or memory.
  CLAWMEM_ERR_FULL = -6,
  // An input exceeds a limit.
  CLAWMEM_ERR_TOO_LARGE = -7,
  // The session is blocked: it is over its size limit after compaction.
  CLAWMEM_ERR_BLOCKED = -8,
  // No such session, item or document.
  CLAWMEM_ERR_NOT_FOUND = -9,
  // The session table is full.
  CLAWMEM_ERR_TOO_MANY_SESSIONS = -10,
  // An output buffer is too small; the size needed was returned.
  CLAWMEM_ERR_BUFFER_TOO_SMALL = -11,
  // A recall named a label that is not in the catalog.
  CLAWMEM_ERR_UNKNOWN_LABEL = -12,
  // The configuration does not fit the flash, or the store on the
  // partition was written with another erase or program size than
  // `clawmem_flash_t` gives (nothing was written; clawmem_last_error
  // names the sizes it was written with).
  CLAWMEM_ERR_CONFIG = -13,
  // The store is not mounted (never, or after clawmem_unmount or a
  // failed mount).
  CLAWMEM_ERR_NOT_MOUNTED = -14,
  // The flash cannot do this (scrub needs `multiwrite`).
  CLAWMEM_ERR_UNSUPPORTED = -15,
  // An internal error of clawmem: a bug, please report it.
  CLAWMEM_ERR_INTERNAL = -16,
} clawmem_err_t;

// Tunables of a store; clawmem_config_init gives ESP-Claw's defaults.
typedef struct {
  // A session over this many bytes (ESP-Claw's `.log` size) after a
  // completed turn is compacted, then blocked if still over (150 KiB).
  uint32_t session_size_limit_bytes;
  // Longest session id, 1 to 255 bytes.
  uint32_t max_session_id_bytes;
  // Payload bytes between checkpoints; bounds what a mount reads.
  uint32_t checkpoint_interval_bytes;
  // Largest profile document.
  uint32_t profile_max_bytes;
  // Most active memory items (ESP-Claw: 128).
  uint32_t memory_max_items;
  // Room history leaves for memory and profiles, in bytes;
  // `UINT32_MAX` for the default rule (docs/DESIGN.md).
  uint32_t knowledge_reserve_bytes;
} clawmem_config_t;

// Memory for one store: declare one (static or in a task's memory),
// aligned as this struct is, and never move it while mounted (a copy or a
// moved block answers CLAWMEM_ERR_INVALID until it is mounted again). No
// callback may longjmp or throw out of a clawmem call. A callback
// (flash, item or session) must not call into the store that called it:
// such a call answers CLAWMEM_ERR_INVALID and does nothing.
typedef struct {
  uint64_t opaque[CLAWMEM_STORE_WORDS];
} clawmem_store_t;

// Reads `len` bytes at byte offset `off` of the partition into `buf`.
// Returns 0, or a negative value on failure.
typedef int (*clawmem_read_fn)(void *ctx, uint32_t off, uint8_t *buf, uint32_t len);

// Programs `len` bytes at `off` (both multiples of `prog_size`); NOR rules:
// bits only go from 1 to 0. Returns 0, or a negative value on failure.
typedef int (*clawmem_prog_fn)(void *ctx, uint32_t off, const uint8_t *buf, uint32_t len);

// Erases `len` bytes at `off` (both multiples of `erase_size`) to 0xFF.
// Returns 0, or a negative value on failure.
typedef int (*clawmem_erase_fn)(void *ctx, uint32_t off, uint32_t len);

// The flash partition a store lives on. The callbacks and `ctx` must stay
// valid while the store is mounted; offsets are from the partition's start.
typedef struct {
  // Passed to every callback.
  void *ctx;
  // Reads bytes.
  clawmem_read_fn read;
  // Programs bytes.
  clawmem_prog_fn prog;
  // Erases sectors.
  clawmem_erase_fn erase;
  // Smallest read, a power of two up to 32 (1 on ESP32 and most NOR).
  uint32_t read_size;
  // Program unit, a power of two up to 32, each unit written once
  // between erases (4 on ESP32, 16 with ESP32 flash encryption).
  uint32_t prog_size;
  // Sector (erase unit), a power of two from 128 B to 128 KiB.
  uint32_t erase_size;
  // Sectors in the partition, at least 4.
  uint32_t sector_count;
  // Whether a unit may be programmed again before an erase, clearing
  // more bits (true for plain SPI NOR, false with flash encryption or
  // ECC). Only clawmem_memory_forget_scrub needs it.
  bool multiwrite;
} clawmem_flash_t;

// The partition's use, in sectors.
typedef struct {
  // Sectors in the partition.
  uint32_t sectors;
  // Sectors holding data.
  uint32_t used_sectors;
  // Sectors kept free for collection and maintenance now.
  uint32_t reserve_sectors;
  // Bytes of a sector.
  uint32_t sector_bytes;
} clawmem_space_t;

// What the last mount read and recovered.
typedef struct {
  // Sector headers read.
  uint32_t sector_headers;
  // Chunk headers scanned after the checkpoint.
  uint32_t chunks_scanned;
  // Whether a checkpoint was found.
  bool from_checkpoint;
  // Whether a torn write at the head was sealed.
  bool sealed_head;
  // Whether a torn write at the head was passed over, writing going on
  // after it in the same sector.
  bool resumed_head;
  // Batches left out as damaged.
  uint32_t ignored_batches;
  // Sector headers found damaged.
  uint32_t damaged_headers;
} clawmem_mount_report_t;

// What clawmem_maintain did.
typedef struct {
  // Steps taken (a checkpoint, a collection step or a sector erase).
  uint32_t steps;
  // Whether nothing is left to do.
  bool done;
} clawmem_maintenance_t;

// A memory item to store, or a patch to update one with: NUL-terminated
// UTF-8 texts, NULL for none. Tags and keywords are lists separated by any
// of `, ; / |`.
typedef struct {
  // The memory text (required to store).
  const char *content;
  // Tags, the source of the catalog's labels.
  const char *tags;
  // Retrieval keywords.
  const char *keywords;
  // Where it came from (empty: `manual`).
  const char *source;
} clawmem_item_input_t;

// What a memory store or update did.
typedef struct {
  // The item's id (an existing item's, for a duplicate).
  uint32_t id;
  // False if it duplicated an item and nothing was written.
  bool changed;
  // Items the replace intent forgot.
  uint16_t replaced;
} clawmem_stored_t;

// A memory item as its fields' texts (none NUL-terminated; print with
// `%.*s`), valid during the callback only.
typedef struct {
  // Its id; its text form is `mem-<id>`.
  uint32_t id;
  // The memory text.
  const char *content;
  // Bytes of `content`.
  size_t content_len;
  // Its tags, normalized.
  const char *tags;
  // Bytes of `tags`.
  size_t tags_len;
  // Its keywords, normalized.
  const char *keywords;
  // Bytes of `keywords`.
  size_t keywords_len;
  // Where it came from.
  const char *source;
  // Bytes of `source`.
  size_t source_len;
  // Seconds, as the caller gave them.
  uint32_t created_at;
  // Seconds, as the caller gave them.
  uint32_t updated_at;
  // Times recalled.
  uint16_t access_count;
} clawmem_item_t;

// Called once per memory item.
typedef void (*clawmem_item_cb)(void *ctx, const clawmem_item_t *item);

// A history record: ESP-Claw's record type and backend format, and the
// message (JSON text, not NUL-terminated).
typedef struct {
  // `CLAWMEM_RECORD_*`.
  uint8_t type_;
  // `CLAWMEM_FORMAT_*`.
  uint8_t format;
  // The body; may be NULL when `body_len` is 0.
  const uint8_t *body;
  // Bytes of `body`.
  size_t body_len;
} clawmem_record_t;

// What an append did.
typedef struct {
  // The session was compacted (its completed turn took it over the
  // limit).
  bool compacted;
  // The session is now blocked (still over the limit).
  bool blocked;
} clawmem_appended_t;

// A history read into the caller's buffer; walk it with
// clawmem_history_next.
typedef struct {
  // The caller's buffer.
  const uint8_t *buf;
  // Bytes of it the history fills.
  size_t used_bytes;
  // Records in it.
  uint32_t records;
  // Records left out because they failed their checks.
  uint32_t damaged_records;
  // With CLAWMEM_ERR_BUFFER_TOO_SMALL: the buffer size needed.
  size_t needed_bytes;
} clawmem_history_t;

// A history read handed out a record at a time: opened by
// clawmem_history_stream_open, read by clawmem_history_stream_next.
// Declare one where the read runs (a task's stack or a static); it belongs
// to the store it was opened on. It may be copied, and is never freed.
typedef struct {
  uint64_t opaque[CLAWMEM_HISTORY_STREAM_WORDS];
} clawmem_history_stream_t;

// What a history stream will give, known when it opens.
typedef struct {
  // Records it gives.
  uint32_t records;
  // Records left out because they failed their checks.
  uint32_t damaged_records;
  // Body bytes it gives in all (for a `Content-Length`).
  size_t total_bytes;
  // The buffer clawmem_history_stream_next needs: the longest record
  // (with its rewrite, for a final answer of another backend).
  size_t buffer_bytes;
  // With CLAWMEM_ERR_BUFFER_TOO_SMALL: the buffer size needed.
  size_t needed_bytes;
} clawmem_history_stream_info_t;

// A session's state.
typedef struct {
  // Records in its history.
  uint32_t records;
  // Its ESP-Claw `.log` size: bodies plus a newline each.
  uint32_t size_bytes;
  // Whether it is blocked.
  bool blocked;
} clawmem_session_info_t;

// Called once per session by clawmem_session_list: `id` is NUL-terminated
// (and `id_len` bytes long) and valid during the call only.
typedef void (*clawmem_session_cb)(void *ctx, const char *id, size_t id_len, const clawmem_session_info_t *info);

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// The size of a clawmem_store_t in bytes (CLAWMEM_STORE_WORDS * 8).
size_t clawmem_store_size(void);

// The bytes of a clawmem_store_t this build uses (at most clawmem_store_size).
size_t clawmem_store_used(void);

// Fills `config` with the defaults (ESP-Claw's limits). Does nothing if
// `config` is NULL.
//
// # Safety
// `config` is NULL or writable.
void clawmem_config_init(clawmem_config_t *config);

// Mounts the store on `flash` into `store`. `config` may be NULL for the
// defaults; `mode` is CLAWMEM_MOUNT_EXISTING or
// CLAWMEM_MOUNT_FORMAT_IF_BLANK. With CLAWMEM_MOUNT_FORMAT_IF_BLANK a blank partition is
// formatted; a foreign one is never touched (CLAWMEM_ERR_NOT_FORMATTED).
// An image of a newer format is refused untouched (CLAWMEM_ERR_VERSION).
//
// Reads the sector headers, the head sector, the newest checkpoint and
// the chunk headers after it: not the whole partition.
//
// Power loss: a mount of a sound image writes nothing; it writes only to
// record a recovery (each such write is atomic) or to format.
//
// # Safety
// `store` is NULL or a clawmem_store_t that is not moved while mounted;
// `flash` is NULL or a valid clawmem_flash_t whose callbacks and `ctx` stay
// valid while mounted; `config` is NULL or valid.
int clawmem_mount(clawmem_store_t *store, const clawmem_flash_t *flash, const clawmem_config_t *config, uint32_t mode);

// Formats the partition and mounts the empty store: everything stored is
// lost.
//
// Power loss: a cut leaves the old store (possibly missing erased
// sectors, which mount tolerates) or a blank partition; format again.
//
// # Safety
// As clawmem_mount.
int clawmem_format(clawmem_store_t *store, const clawmem_flash_t *flash, const clawmem_config_t *config);

// Unmounts: later calls answer CLAWMEM_ERR_NOT_MOUNTED until a mount. The
// store writes nothing here (every acknowledged write is already on
// flash), so the block and the flash may then be reused.
//
// # Safety
// `store` is NULL or a clawmem_store_t.
int clawmem_unmount(clawmem_store_t *store);

// The name of a result code, e.g. "store full". Never NULL. Touches no
// store or flash.
const char *clawmem_strerror(int code);

// Says what was wrong with the store's last failed call (for example
// "store full: needs 644 B, 0 B can be freed; delete sessions or memory"),
// NUL-terminated, into `buf`; "" if no call failed since the mount.
// `*len` gets the text's length, or with CLAWMEM_ERR_BUFFER_TOO_SMALL the
// size needed.
//
// # Safety
// `store` is NULL or a clawmem_store_t; `buf` NULL (with `cap` 0) or
// writable for `cap` bytes; `len` NULL or writable.
int clawmem_last_error(clawmem_store_t *store, char *buf, size_t cap, size_t *len);

// The partition's use.
//
// Power loss: reads RAM only.
//
// # Safety
// `store` is NULL or a clawmem_store_t; `out` NULL or writable.
int clawmem_space(clawmem_store_t *store, clawmem_space_t *out);

// What the last mount read and recovered.
//
// Power loss: reads RAM only.
//
// # Safety
// `store` is NULL or a clawmem_store_t; `out` NULL or writable.
int clawmem_mount_report(clawmem_store_t *store, clawmem_mount_report_t *out);

// Reads and checks everything stored (every record's CRC); `*checked` gets
// the number of records checked.
//
// Power loss: reads only.
//
// # Safety
// `store` is NULL or a clawmem_store_t; `checked` NULL or writable.
int clawmem_check(clawmem_store_t *store, uint32_t *checked);

// Idle-time work, at most `max_steps` steps: a due checkpoint, a
// collection step, erasing the sectors the head opens next. Call it while
// the model thinks, so that appends neither erase nor collect.
//
// Power loss: every step is power-safe on its own.
//
// # Safety
// `store` is NULL or a clawmem_store_t; `out` NULL or writable.
int clawmem_maintain(clawmem_store_t *store, uint32_t max_steps, clawmem_maintenance_t *out);

// Reads a profile document (`CLAWMEM_PROFILE_*`) into `buf`,
// NUL-terminated; `*len` its length, or the size needed. A document never
// written is created with its default contents first, as ESP-Claw creates
// the missing file (on a full partition the default is returned without
// being stored).
//
// Power loss: creating the default is atomic.
//
// # Safety
// `store` NULL or a clawmem_store_t; `buf` NULL (with `cap` 0) or writable
// for `cap` bytes; `len` NULL or writable.
int clawmem_profile_read(clawmem_store_t *store, uint8_t doc, char *buf, size_t cap, size_t *len);

// Writes a profile document (UTF-8, `len` bytes, at most
// `profile_max_bytes`), replacing it.
//
// Power loss: atomic; a cut leaves the old document or the new one.
//
// # Safety
// `store` NULL or a clawmem_store_t; `body` NULL (with `len` 0) or readable
// for `len` bytes.
int clawmem_profile_write(clawmem_store_t *store, uint8_t doc, const char *body, size_t len);

// Writes a profile document only if it was never written (a firmware's
// defaults); `*written` says whether it was.
//
// Power loss: atomic.
//
// # Safety
// As clawmem_profile_write; `written` NULL or writable.
int clawmem_profile_write_if_absent(clawmem_store_t *store, uint8_t doc, const char *body, size_t len, bool *written);

// Parses an item id's text form `mem-<n>` into `*id`; CLAWMEM_ERR_INVALID
// if it is not one. Touches no store or flash.
//
// # Safety
// `id_text` NULL or NUL-terminated; `id` NULL or writable.
int clawmem_item_id_parse(const char *id_text, uint32_t *id);

// Stores a memory item (ESP-Claw's `store`), at `now` seconds (0 without a
// clock). A duplicate of an active item writes nothing (`changed` false);
// `replace` forgets the items it supersedes. `out` may be NULL.
//
// Power loss: the item is one atomic write.
//
// # Safety
// `store` NULL or a clawmem_store_t; `input` NULL or valid; `out` NULL or
// writable.
int clawmem_memory_store(clawmem_store_t *store, const clawmem_item_input_t *input, uint32_t now, bool replace, clawmem_stored_t *out);

// Recalls up to `limit` items under any of `labels` (all items for none),
// best first, calling `cb` for each (ESP-Claw's `recall`); each recalled
// item's access count is noted. `*count` gets how many. A label not in
// the catalog is CLAWMEM_ERR_UNKNOWN_LABEL, recalling nothing, and
// clawmem_last_error names it and the labels available.
//
// Power loss: the access record is atomic; a cut loses at most this
// recall's count increments.
//
// # Safety
// `store` NULL or a clawmem_store_t; `labels` NULL (with `n_labels` 0) or
// `n_labels` NUL-terminated texts; `cb` valid or NULL; `count` NULL or
// writable.
int clawmem_memory_recall(clawmem_store_t *store, const char *const *labels, size_t n_labels, size_t limit, uint32_t now, clawmem_item_cb cb, void *ctx, size_t *count);

// Calls `cb` for every active item in priority order (access count, then
// update time, descending; then id); `*count` gets how many.
//
// Power loss: reads only.
//
// # Safety
// As clawmem_memory_recall.
int clawmem_memory_list(clawmem_store_t *store, clawmem_item_cb cb, void *ctx, size_t *count);

// Calls `cb` once with the active item `id`; CLAWMEM_ERR_NOT_FOUND if
// there is none.
//
// Power loss: reads only.
//
// # Safety
// `store` NULL or a clawmem_store_t; `cb` valid or NULL.
int clawmem_memory_get(clawmem_store_t *store, uint32_t id, clawmem_item_cb cb, void *ctx);

// Updates item `id` (ESP-Claw's `update`): the non-empty fields of `patch`
// replace the item's, and the result is stored under a new id, the old
// one forgotten. `*updated` is false if the patch changes nothing (then
// `out` is untouched). CLAWMEM_ERR_NOT_FOUND if `id` is not active.
//
// Power loss: two atomic writes (the new item, the old one's tombstone);
// a cut between them is repaired at the next compaction, through the
// lineage the new item records.
//
// # Safety
// `store` NULL or a clawmem_store_t; `patch` NULL or valid; `out` and
// `updated` NULL or writable.
int clawmem_memory_update(clawmem_store_t *store, uint32_t id, const clawmem_item_input_t *patch, uint32_t now, clawmem_stored_t *out, bool *updated);

// The newest id in `id`'s line of updates (the id itself if it was never
// updated), into `*newest`.
//
// Power loss: reads only.
//
// # Safety
// `store` NULL or a clawmem_store_t; `newest` NULL or writable.
int clawmem_memory_newest(clawmem_store_t *store, uint32_t id, uint32_t *newest);

// Forgets item `id` (a tombstone; its text stays on flash until collected,
// see clawmem_memory_forget_scrub). CLAWMEM_ERR_NOT_FOUND if not active.
//
// Power loss: atomic.
//
// # Safety
// `store` NULL or a clawmem_store_t.
int clawmem_memory_forget(clawmem_store_t *store, uint32_t id);

// Forgets item `id` and wipes its text from flash now (a sector's other
// data is moved first). Needs a flash with `multiwrite`; otherwise
// CLAWMEM_ERR_UNSUPPORTED and nothing is written.
//
// Power loss: the item is forgotten atomically first; a cut during the
// wipe leaves it forgotten, and the next mount completes the wipe.
//
// # Safety
// `store` NULL or a clawmem_store_t.
int clawmem_memory_forget_scrub(clawmem_store_t *store, uint32_t id);

// Active items, into `*count`.
//
// Power loss: reads only.
//
// # Safety
// `store` NULL or a clawmem_store_t; `count` NULL or writable.
int clawmem_memory_count(clawmem_store_t *store, size_t *count);

// Rewrites memory's index and drops forgotten items from it now.
//
// Power loss: atomic.
//
// # Safety
// `store` NULL or a clawmem_store_t.
int clawmem_memory_compact(clawmem_store_t *store);

// Forgets every memory item.
//
// Power loss: atomic.
//
// # Safety
// `store` NULL or a clawmem_store_t.
int clawmem_memory_clear(clawmem_store_t *store);

// The memory catalog section of the system prompt (ESP-Claw's summary
// labels with their counts), NUL-terminated into `buf`; `*len` its
// length, or the size needed.
//
// Power loss: reads only.
//
// # Safety
// `store` NULL or a clawmem_store_t; `buf` NULL (with `cap` 0) or writable
// for `cap` bytes; `len` NULL or writable.
int clawmem_memory_prompt(clawmem_store_t *store, char *buf, size_t cap, size_t *len);

// `MEMORY.md` as ESP-Claw renders it, NUL-terminated into `buf`; `*len`
// its length, or the size needed.
//
// Power loss: reads only.
//
// # Safety
// As clawmem_memory_prompt.
int clawmem_memory_md(clawmem_store_t *store, char *buf, size_t cap, size_t *len);

// Begins a memory stage (a request): the stage note then lists what the
// request's memory calls did.
//
// Power loss: RAM only (the note is not stored).
//
// # Safety
// `store` NULL or a clawmem_store_t.
int clawmem_memory_stage_begin(clawmem_store_t *store);

// The stage note ESP-Claw appends after a stage's memory calls,
// NUL-terminated into `buf` ("" and `*len` 0 when there is none).
//
// Power loss: RAM only.
//
// # Safety
// As clawmem_memory_prompt.
int clawmem_memory_stage_note(clawmem_store_t *store, char *buf, size_t cap, size_t *len);

// The `recall` tool's JSON reply (ESP-Claw's `cap_memory_render_result`),
// NUL-terminated into `buf`; `*items` gets the items recalled, and
// `*invalid_label` whether a label was not in the catalog (the reply is
// then ESP-Claw's error JSON, and nothing was recalled or written). The
// recall happens even when `buf` is too small.
//
// Power loss: as clawmem_memory_recall.
//
// # Safety
// As clawmem_memory_recall and clawmem_memory_prompt; `items` and
// `invalid_label` NULL or writable.
int clawmem_memory_recall_json(clawmem_store_t *store, const char *const *labels, size_t n_labels, size_t limit, uint32_t now, char *buf, size_t cap, size_t *len, size_t *items, bool *invalid_label);

// The `list` tool's JSON reply, NUL-terminated into `buf`; `*items` gets
// how many items it lists.
//
// Power loss: writes nothing to flash.
//
// # Safety
// As clawmem_memory_prompt; `items` NULL or writable.
int clawmem_memory_list_json(clawmem_store_t *store, char *buf, size_t cap, size_t *len, size_t *items);

// The request gate (ESP-Claw's check before a request): `*blocked` is set,
// and for a blocked session the warning to show the user is written into
// `warning` (NUL-terminated; `*len` its length, or the size needed).
// `session` may be NULL (no session: never blocked).
//
// Power loss: reads RAM only; never fails closed on a flash fault.
//
// # Safety
// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated;
// `blocked` and `len` NULL or writable; `warning` NULL (with `cap` 0) or
// writable for `cap` bytes.
int clawmem_gate(clawmem_store_t *store, const char *session, bool *blocked, char *warning, size_t cap, size_t *len);

// Appends a batch of `n` records to `session` (created on first use);
// `turn_completed` when the batch ends a turn (ESP-Claw compacts, and
// blocks an oversized session, only then). `out` may be NULL.
//
// Power loss: the batch is one atomic write: after a cut a fresh mount
// shows all of it or none of it, and everything acknowledged before.
//
// # Safety
// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated;
// `records` NULL (with `n` 0) or `n` valid records; `out` NULL or
// writable.
int clawmem_append(clawmem_store_t *store, const char *session, const clawmem_record_t *records, size_t n, bool turn_completed, clawmem_appended_t *out);

// Compacts `session` now, keeping its last `keep_turns` turns after
// `summary`; `*compacted` is false if there was nothing to drop.
//
// Power loss: atomic; a cut leaves the session as before or compacted.
//
// # Safety
// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated;
// `summary` NULL or a valid record; `compacted` NULL or writable.
int clawmem_compact_with_summary(clawmem_store_t *store, const char *session, uint64_t keep_turns, const clawmem_record_t *summary, bool *compacted);

// Reads `session`'s history, as ESP-Claw loads it for a request in the
// `current_format` backend (records of the other format are left out),
// into `buf`; walk it with clawmem_history_next. A session that does not
// exist, or is empty, is CLAWMEM_ERR_NOT_FOUND; `out` is required. With CLAWMEM_ERR_BUFFER_TOO_SMALL,
// `out->needed_bytes` is the size needed: the session as stored, or more
// when final answers of another backend are rewritten after their bodies
// (a call with that size may then ask again, for more).
//
// Power loss: reads, and may rewrite the session's index to repair
// damage found at rest (one atomic write).
//
// # Safety
// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated; `buf`
// NULL (with `cap` 0) or writable for `cap` bytes; `out` writable (NULL is
// refused).
int clawmem_history(clawmem_store_t *store, const char *session, uint8_t current_format, uint8_t *buf, size_t cap, clawmem_history_t *out);

// The record at `*cursor` (start at 0) of a history: returns 1 and fills
// `rec` (its body points into the history's buffer) and advances
// `*cursor`, 0 at the end, or CLAWMEM_ERR_INVALID for a NULL argument or
// a cursor that is not at a record of the history.
// Reads the caller's buffer only.
//
// # Safety
// `history` NULL or filled by clawmem_history_t, its buffer unchanged since;
// `cursor` and `rec` NULL or writable.
int clawmem_history_next(const clawmem_history_t *history, size_t *cursor, clawmem_record_t *rec);

// Opens a streaming read of `session`'s history for the `current_format`
// backend: the records clawmem_history gives, handed out one at a time by
// clawmem_history_stream_next into a buffer that holds the longest one,
// never the whole session. `buf` is that buffer: the open uses it to check
// every record and count what the stream gives (`info`, required). With
// CLAWMEM_ERR_BUFFER_TOO_SMALL, `info->needed_bytes` is the size needed. A
// session that does not exist, or is empty, is CLAWMEM_ERR_NOT_FOUND.
//
// Power loss: reads only.
//
// # Safety
// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated;
// `buf` NULL (with `cap` 0) or writable for `cap` bytes; `stream` NULL or
// writable for a clawmem_history_stream_t; `info` writable (NULL is
// refused).
int clawmem_history_stream_open(clawmem_store_t *store, const char *session, uint8_t current_format, uint8_t *buf, size_t cap, clawmem_history_stream_t *stream, clawmem_history_stream_info_t *info);

// The next record of a history stream, oldest first: returns 1 and fills
// `rec` (its body points into `buf`, valid until the next call that
// writes `buf`), or 0 after the last record. `cap` must be at least the
// `buffer_bytes` the open gave (else CLAWMEM_ERR_BUFFER_TOO_SMALL, and the
// stream stays where it was). A stream whose session was written to since
// it opened, or whose sectors the store reclaimed, answers
// CLAWMEM_ERR_INVALID: open it again. So does a stream after a call of it
// failed part-way (a flash error: its place is lost), and one whose last
// open failed or that was opened on another store.
//
// Power loss: reads; after the last record, a read that met damage may
// rewrite the session's index (one atomic write).
//
// # Safety
// `store` NULL or a clawmem_store_t; `stream` NULL or a block that
// clawmem_history_stream_open was given (and not written since but by
// clawmem calls); `buf` NULL (with `cap` 0) or writable for `cap` bytes;
// `rec` NULL or writable.
int clawmem_history_stream_next(clawmem_store_t *store, clawmem_history_stream_t *stream, uint8_t *buf, size_t cap, clawmem_record_t *rec);

// A session's state; CLAWMEM_ERR_NOT_FOUND if it does not exist.
//
// Power loss: reads only.
//
// # Safety
// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated;
// `out` NULL or writable.
int clawmem_session_info(clawmem_store_t *store, const char *session, clawmem_session_info_t *out);

// Calls `cb` once per session (any order); `*count` gets the number of
// sessions listed (a session whose name was damaged at rest beyond repair
// cannot be listed, nor looked up).
//
// Power loss: reads only.
//
// # Safety
// `store` NULL or a clawmem_store_t; `cb` a valid callback or NULL (count
// only); `count` NULL or writable.
int clawmem_session_list(clawmem_store_t *store, clawmem_session_cb cb, void *ctx, size_t *count);

// Deletes `session`'s history (ESP-Claw's delete of its `.log` and
// `.idx`); CLAWMEM_ERR_NOT_FOUND if it does not exist.
//
// Power loss: atomic.
//
// # Safety
// `store` NULL or a clawmem_store_t; `session` NULL or NUL-terminated.
int clawmem_session_delete(clawmem_store_t *store, const char *session);

// Deletes every session; `*deleted` gets how many.
//
// Power loss: atomic.
//
// # Safety
// `store` NULL or a clawmem_store_t; `deleted` NULL or writable.
int clawmem_sessions_clear(clawmem_store_t *store, size_t *deleted);

// The session id a chat's next turn goes to (ESP-Claw's
// `<channel>:<chat_id>` key and its current alias), NUL-terminated into
// `buf`; `*len` its length, or the size needed.
//
// Power loss: may write the chat's map on first use (atomic).
//
// # Safety
// `store` NULL or a clawmem_store_t; `channel`, `chat_id` NULL or
// NUL-terminated; `buf` NULL (with `cap` 0) or writable for `cap`; `len`
// NULL or writable.
int clawmem_chat_session(clawmem_store_t *store, const char *channel, const char *chat_id, char *buf, size_t cap, size_t *len);

// Handles a chat message that may be a `/session` command (new, list,
// switch, delete): `*handled` is false if it is not one (nothing is
// written); else the reply ESP-Claw sends (a usage text, the list, a
// confirmation or a refusal) is written NUL-terminated into `reply`.
//
// Power loss: a command that changes the chat's map writes it atomically;
// `delete` deletes the session's history first, then the map entry, so a
// cut between leaves the alias with an empty history.
//
// # Safety
// `store` NULL or a clawmem_store_t; `channel`, `chat_id`, `message` NULL or
// NUL-terminated; `handled`, `len` NULL or writable; `reply` NULL (with
// `cap` 0) or writable for `cap` bytes.
int clawmem_session_command(clawmem_store_t *store, const char *channel, const char *chat_id, const char *message, bool *handled, char *reply, size_t cap, size_t *len);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* CLAWMEM_H */
