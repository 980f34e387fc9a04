//! ESP-Claw's `CHDX` session index: record types, backend formats, and the
//! byte layout and validation of the `.log.idx` file.
//!
//! Layout (little-endian, packed), from `claw_memory_session_index_header_t`
//! and `claw_memory_session_index_entry_t` in
//! `components/claw_modules/claw_memory/src/claw_memory_session.c`:
//!
//! ```text
//! header  8 bytes: u32 magic 0x58444843 ("CHDX" on disk) | u16 version = 1 | u16 entry_size = 10
//! entry  10 bytes: u32 offset | u32 length | u8 record_type (1..=4) | u8 backend_format (0..=3)
//! ```
//!
//! An entry points into the `.log` file, which holds each record's JSON body
//! followed by one `\n`; `length` counts that newline, so it is never 0.
//!
//! Validation (`session_history_read_index_file` and
//! `session_history_validate_pair`), in ESP-Claw's order: the header is
//! complete and its magic, version and entry size are equal to the constants;
//! `(size - 8) % 10 == 0`; every entry has a valid record type and backend
//! format; if there are no entries the log must be empty; every entry has
//! `length > 0` and `offset + length <= log size`. [`validate_index`] reports
//! the first failure precisely ([`ChdxError`] names the entry and the field).
//!
//! ESP-Claw wipes both files on any failure. clawmem keeps its own log on flash
//! and uses this module to import, export and check ESP-Claw indexes, and to
//! rebuild an index from a log rather than lose it.
//!
//! Difference from ESP-Claw: the ESP-Claw revision read for this module
//! (`session_history_backend_format_valid`) accepts only formats 0 to 2,
//! although its own backend list (`claw_memory_internal.h`) has
//! `OPENAI_RESPONSES = 3` and it stamps that value into the entries it writes,
//! so with that backend every index fails validation and is wiped. Here 3 is
//! valid.
//!
//! Pure logic: no flash I/O, so nothing here is affected by power loss.

use core::fmt;

/// Index magic, `"CHDX"` read as a little-endian `u32`.
pub const CHDX_MAGIC: u32 = 0x5844_4843;

/// Index format version.
pub const CHDX_VERSION: u16 = 1;

/// Size of the index header, in bytes.
pub const CHDX_HEADER_SIZE: usize = 8;

/// Size of one index entry, in bytes.
pub const CHDX_ENTRY_SIZE: usize = 10;

const _: () = assert!(CHDX_MAGIC.to_le_bytes()[0] == b'C');
const _: () = assert!(CHDX_MAGIC.to_le_bytes()[3] == b'X');
const _: () = assert!(CHDX_ENTRY_SIZE <= u16::MAX as usize);

/// Kind of a session history record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RecordType {
    /// `{"role":"user","content":...}`; starts a turn.
    User = 1,
    /// The backend's final assistant message; completes a turn.
    AssistantFinal = 2,
    /// The backend's assistant message that requests tool calls.
    AssistantTool = 3,
    /// A JSON array of tool result messages.
    ToolResult = 4,
}

impl RecordType {
    /// The byte stored in an index entry.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// `true` for the tool records (types 3 and 4) that compaction and the
    /// mixed-backend filter may drop.
    pub const fn is_tool(self) -> bool {
        matches!(self, RecordType::AssistantTool | RecordType::ToolResult)
    }
}

/// A byte that is not a [`RecordType`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidRecordType(pub u8);

impl fmt::Display for InvalidRecordType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid record type {} (expected 1 to 4)", self.0)
    }
}

impl TryFrom<u8> for RecordType {
    type Error = InvalidRecordType;

    fn try_from(value: u8) -> Result<Self, Self::Error> {
        match value {
            1 => Ok(RecordType::User),
            2 => Ok(RecordType::AssistantFinal),
            3 => Ok(RecordType::AssistantTool),
            4 => Ok(RecordType::ToolResult),
            other => Err(InvalidRecordType(other)),
        }
    }
}

impl From<RecordType> for u8 {
    fn from(value: RecordType) -> Self {
        value.as_u8()
    }
}

/// Message format of the LLM backend that wrote a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BackendFormat {
    /// Not known; never causes a mismatch.
    Unknown = 0,
    /// `openai_compatible` (chat completions messages).
    OpenAiCompatible = 1,
    /// `anthropic_compatible` (messages with content blocks).
    AnthropicCompatible = 2,
    /// `openai_responses` (the Responses API).
    OpenAiResponses = 3,
}

impl BackendFormat {
    /// The byte stored in an index entry.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// `true` unless [`BackendFormat::Unknown`].
    pub const fn is_known(self) -> bool {
        !matches!(self, BackendFormat::Unknown)
    }

    /// The backend type name used in ESP-Claw's configuration, or `None` for
    /// [`BackendFormat::Unknown`].
    pub const fn backend_type(self) -> Option<&'static str> {
        match self {
            BackendFormat::Unknown => None,
            BackendFormat::OpenAiCompatible => Some("openai_compatible"),
            BackendFormat::AnthropicCompatible => Some("anthropic_compatible"),
            BackendFormat::OpenAiResponses => Some("openai_responses"),
        }
    }

    /// The format of a configured backend type name; unrecognised names are
    /// [`BackendFormat::Unknown`] (`claw_memory_backend_format_from_type`).
    pub fn from_backend_type(name: &str) -> BackendFormat {
        match name {
            "openai_compatible" => BackendFormat::OpenAiCompatible,
            "anthropic_compatible" => BackendFormat::AnthropicCompatible,
            "openai_responses" => BackendFormat::OpenAiResponses,
            _ => BackendFormat::Unknown,
        }
    }
}

/// A byte that is not a [`BackendFormat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidBackendFormat(pub u8);

impl fmt::Display for InvalidBackendFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid backend format {} (expected 0 to 3)", self.0)
    }
}

impl TryFrom<u8> for BackendFormat {
    type Error = InvalidBackendFormat;

    fn try_from(value: u8) -> Result<Self, Self::Error> {
        match value {
            0 => Ok(BackendFormat::Unknown),
            1 => Ok(BackendFormat::OpenAiCompatible),
            2 => Ok(BackendFormat::AnthropicCompatible),
            3 => Ok(BackendFormat::OpenAiResponses),
            other => Err(InvalidBackendFormat(other)),
        }
    }
}

impl From<BackendFormat> for u8 {
    fn from(value: BackendFormat) -> Self {
        value.as_u8()
    }
}

/// What is wrong with an index, precisely enough to log and act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChdxError {
    /// The index is shorter than its 8-byte header.
    HeaderTruncated {
        /// Bytes present.
        len_bytes: usize,
    },
    /// The header's magic is not [`CHDX_MAGIC`].
    BadMagic {
        /// The magic found.
        found: u32,
    },
    /// The header's version is not [`CHDX_VERSION`].
    UnsupportedVersion {
        /// The version found.
        found: u16,
    },
    /// The header's entry size is not [`CHDX_ENTRY_SIZE`].
    BadEntrySize {
        /// The entry size found.
        found: u16,
    },
    /// The bytes after the header are not a whole number of entries.
    PartialEntry {
        /// Bytes of the incomplete last entry.
        trailing_bytes: usize,
    },
    /// An entry's record type is not 1 to 4.
    BadRecordType {
        /// Position of the entry (0 is the first).
        entry: usize,
        /// The byte found.
        found: u8,
    },
    /// An entry's backend format is not 0 to 3.
    BadBackendFormat {
        /// Position of the entry (0 is the first).
        entry: usize,
        /// The byte found.
        found: u8,
    },
    /// The index has no entries but the log is not empty.
    NoEntriesForData {
        /// Size of the log, in bytes.
        data_size_bytes: u64,
    },
    /// An entry's length is 0 (it must at least count the newline).
    ZeroLength {
        /// Position of the entry (0 is the first).
        entry: usize,
    },
    /// An entry reaches past the end of the log.
    OutOfBounds {
        /// Position of the entry (0 is the first).
        entry: usize,
        /// The entry's offset.
        offset: u32,
        /// The entry's length.
        length: u32,
        /// Size of the log, in bytes.
        data_size_bytes: u64,
    },
}

impl fmt::Display for ChdxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One prefix for every message, and one for the entry's position;
        // the constants are spelled out (asserted below).
        f.write_str("session index ")?;
        if let ChdxError::BadRecordType { entry, .. }
        | ChdxError::BadBackendFormat { entry, .. }
        | ChdxError::ZeroLength { entry }
        | ChdxError::OutOfBounds { entry, .. } = *self
        {
            write!(f, "entry {entry}: ")?;
        }
        match *self {
            ChdxError::HeaderTruncated { len_bytes } => {
                write!(f, "is {len_bytes} bytes, shorter than its 8-byte header")
            }
            ChdxError::BadMagic { found } => {
                write!(f, "magic is {found:#010x}, expected 0x58444843 (\"CHDX\")")
            }
            ChdxError::UnsupportedVersion { found } => {
                write!(f, "version {found} is not supported (expected 1)")
            }
            ChdxError::BadEntrySize { found } => write!(f, "entry size is {found}, expected 10"),
            ChdxError::PartialEntry { trailing_bytes } => {
                write!(f, "ends with a partial entry of {trailing_bytes} bytes")
            }
            // (A byte is written as a u16: one integer writer less.)
            ChdxError::BadRecordType { found, .. } => {
                let found = u16::from(found);
                write!(f, "invalid record type {found} (expected 1 to 4)")
            }
            ChdxError::BadBackendFormat { found, .. } => {
                let found = u16::from(found);
                write!(f, "invalid backend format {found} (expected 0 to 3)")
            }
            ChdxError::NoEntriesForData { data_size_bytes } => {
                write!(f, "has no entries but the log holds {data_size_bytes} bytes")
            }
            ChdxError::ZeroLength { .. } => f.write_str("length is 0"),
            ChdxError::OutOfBounds {
                offset,
                length,
                data_size_bytes,
                ..
            } => write!(
                f,
                "offset {offset} + length {length} is past the end of the {data_size_bytes}-byte log"
            ),
        }
    }
}

// The constants [`ChdxError`]'s messages spell out.
const _: () = assert!(
    CHDX_HEADER_SIZE == 8
        && CHDX_MAGIC == 0x5844_4843
        && CHDX_VERSION == 1
        && CHDX_ENTRY_SIZE == 10
);

/// The 8 header bytes of a valid index.
pub const fn encode_header() -> [u8; CHDX_HEADER_SIZE] {
    let magic = CHDX_MAGIC.to_le_bytes();
    let version = CHDX_VERSION.to_le_bytes();
    let entry_size = (CHDX_ENTRY_SIZE as u16).to_le_bytes();
    [
        magic[0],
        magic[1],
        magic[2],
        magic[3],
        version[0],
        version[1],
        entry_size[0],
        entry_size[1],
    ]
}

/// Checks the header at the start of `index` (only the first 8 bytes are read).
pub fn check_header(index: &[u8]) -> Result<(), ChdxError> {
    let Some(header) = index.get(..CHDX_HEADER_SIZE) else {
        return Err(ChdxError::HeaderTruncated {
            len_bytes: index.len(),
        });
    };
    let [m0, m1, m2, m3, v0, v1, s0, s1] = *header else {
        return Err(ChdxError::HeaderTruncated {
            len_bytes: index.len(),
        });
    };
    let magic = u32::from_le_bytes([m0, m1, m2, m3]);
    if magic != CHDX_MAGIC {
        return Err(ChdxError::BadMagic { found: magic });
    }
    let version = u16::from_le_bytes([v0, v1]);
    if version != CHDX_VERSION {
        return Err(ChdxError::UnsupportedVersion { found: version });
    }
    let entry_size = u16::from_le_bytes([s0, s1]);
    if usize::from(entry_size) != CHDX_ENTRY_SIZE {
        return Err(ChdxError::BadEntrySize { found: entry_size });
    }
    Ok(())
}

/// Number of entries in an index of `index_size_bytes`, or why that size is
/// impossible.
pub fn entry_count(index_size_bytes: usize) -> Result<usize, ChdxError> {
    let Some(payload) = index_size_bytes.checked_sub(CHDX_HEADER_SIZE) else {
        return Err(ChdxError::HeaderTruncated {
            len_bytes: index_size_bytes,
        });
    };
    let trailing_bytes = payload % CHDX_ENTRY_SIZE;
    if trailing_bytes != 0 {
        return Err(ChdxError::PartialEntry { trailing_bytes });
    }
    Ok(payload / CHDX_ENTRY_SIZE)
}

/// An index entry as stored, before its fields are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawEntry {
    /// Offset of the record in the log.
    pub offset: u32,
    /// Length of the record, body plus its newline.
    pub length: u32,
    /// Record type byte.
    pub record_type: u8,
    /// Backend format byte.
    pub backend_format: u8,
}

impl RawEntry {
    /// Decodes the 10 bytes of an entry; any byte pattern decodes.
    pub const fn decode(bytes: &[u8; CHDX_ENTRY_SIZE]) -> RawEntry {
        RawEntry {
            offset: u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            length: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            record_type: bytes[8],
            backend_format: bytes[9],
        }
    }

    /// Encodes the entry into its 10 bytes.
    pub const fn encode(&self) -> [u8; CHDX_ENTRY_SIZE] {
        let offset = self.offset.to_le_bytes();
        let length = self.length.to_le_bytes();
        [
            offset[0],
            offset[1],
            offset[2],
            offset[3],
            length[0],
            length[1],
            length[2],
            length[3],
            self.record_type,
            self.backend_format,
        ]
    }

    /// Checks the type and format bytes (the checks ESP-Claw makes while
    /// reading the index); `entry` is the entry's position, for the error.
    pub fn check_fields(&self, entry: usize) -> Result<(RecordType, BackendFormat), ChdxError> {
        let record_type = RecordType::try_from(self.record_type)
            .map_err(|e| ChdxError::BadRecordType { entry, found: e.0 })?;
        let backend_format = BackendFormat::try_from(self.backend_format)
            .map_err(|e| ChdxError::BadBackendFormat { entry, found: e.0 })?;
        Ok((record_type, backend_format))
    }

    /// Checks the length and bounds against a log of `data_size_bytes` (the
    /// checks ESP-Claw makes against the log).
    pub fn check_bounds(&self, entry: usize, data_size_bytes: u64) -> Result<(), ChdxError> {
        if self.length == 0 {
            return Err(ChdxError::ZeroLength { entry });
        }
        let end = u64::from(self.offset).checked_add(u64::from(self.length));
        match end {
            Some(end) if end <= data_size_bytes => Ok(()),
            _ => Err(ChdxError::OutOfBounds {
                entry,
                offset: self.offset,
                length: self.length,
                data_size_bytes,
            }),
        }
    }

    /// Runs every check and returns the typed entry.
    pub fn validate(&self, entry: usize, data_size_bytes: u64) -> Result<Entry, ChdxError> {
        let (record_type, backend_format) = self.check_fields(entry)?;
        self.check_bounds(entry, data_size_bytes)?;
        Ok(Entry {
            offset: self.offset,
            length: self.length,
            record_type,
            backend_format,
        })
    }
}

/// A checked index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Offset of the record in the log.
    pub offset: u32,
    /// Length of the record, body plus its newline (at least 1).
    pub length: u32,
    /// Kind of the record.
    pub record_type: RecordType,
    /// Backend that wrote it.
    pub backend_format: BackendFormat,
}

impl Entry {
    /// The entry for a record whose JSON body is `body_len_bytes` long,
    /// written at `offset`; `None` if the length (body plus newline) does not
    /// fit a `u32`.
    pub fn for_body(
        offset: u32,
        body_len_bytes: usize,
        record_type: RecordType,
        backend_format: BackendFormat,
    ) -> Option<Entry> {
        let length = u32::try_from(body_len_bytes.checked_add(1)?).ok()?;
        Some(Entry {
            offset,
            length,
            record_type,
            backend_format,
        })
    }

    /// Length of the JSON body, without the newline.
    pub const fn body_len(&self) -> u32 {
        self.length.saturating_sub(1)
    }

    /// Offset of the record's newline in the log (ESP-Claw requires a `\n`
    /// there when it reads the record).
    pub const fn newline_offset(&self) -> u64 {
        self.offset as u64 + self.body_len() as u64
    }

    /// Offset just past the record in the log.
    pub const fn end(&self) -> u64 {
        self.offset as u64 + self.length as u64
    }

    /// The stored form of the entry.
    pub const fn raw(&self) -> RawEntry {
        RawEntry {
            offset: self.offset,
            length: self.length,
            record_type: self.record_type.as_u8(),
            backend_format: self.backend_format.as_u8(),
        }
    }

    /// Encodes the entry into its 10 bytes.
    pub const fn encode(&self) -> [u8; CHDX_ENTRY_SIZE] {
        self.raw().encode()
    }
}

/// The raw entry at position `entry` of a whole index file, or `None` if the
/// index is too short to hold it.
pub fn raw_entry_at(index: &[u8], entry: usize) -> Option<RawEntry> {
    let start = entry
        .checked_mul(CHDX_ENTRY_SIZE)?
        .checked_add(CHDX_HEADER_SIZE)?;
    let end = start.checked_add(CHDX_ENTRY_SIZE)?;
    let bytes: &[u8; CHDX_ENTRY_SIZE] = index.get(start..end)?.try_into().ok()?;
    Some(RawEntry::decode(bytes))
}

/// Validates a whole index file against a log of `data_size_bytes`, in
/// ESP-Claw's order, and returns the number of entries.
pub fn validate_index(index: &[u8], data_size_bytes: u64) -> Result<usize, ChdxError> {
    check_header(index)?;
    let count = entry_count(index.len())?;
    // Two passes over the entries (`entry_count` made every one whole):
    // their fields, then, after the empty-index check, their bounds.
    for bounds in [false, true] {
        if bounds && count == 0 && data_size_bytes > 0 {
            return Err(ChdxError::NoEntriesForData { data_size_bytes });
        }
        let (entries, _) = index
            .get(CHDX_HEADER_SIZE..)
            .unwrap_or_default()
            .as_chunks();
        for (entry, bytes) in entries.iter().enumerate() {
            let raw = RawEntry::decode(bytes);
            match bounds {
                false => raw.check_fields(entry).map(|_| ())?,
                true => raw.check_bounds(entry, data_size_bytes)?,
            }
        }
    }
    Ok(count)
}

/// The checked entries of an index that [`validate_index`] accepted.
///
/// Entries that fail a check are skipped, so on an unvalidated index this
/// yields only the good ones.
pub fn entries(index: &[u8], data_size_bytes: u64) -> impl Iterator<Item = Entry> + '_ {
    let (entries, _) = index
        .get(CHDX_HEADER_SIZE..)
        .unwrap_or_default()
        .as_chunks();
    entries
        .iter()
        .enumerate()
        .filter_map(move |(entry, bytes)| {
            RawEntry::decode(bytes)
                .validate(entry, data_size_bytes)
                .ok()
        })
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::vec::Vec;

    fn entry(offset: u32, length: u32, record_type: u8, backend_format: u8) -> RawEntry {
        RawEntry {
            offset,
            length,
            record_type,
            backend_format,
        }
    }

    fn index_of(entries: &[RawEntry]) -> Vec<u8> {
        let mut bytes = Vec::from(encode_header());
        for e in entries {
            bytes.extend_from_slice(&e.encode());
        }
        bytes
    }

    #[test]
    fn header_bytes_are_chdx_v1_entry_10() {
        assert_eq!(&encode_header(), b"CHDX\x01\x00\x0a\x00");
        assert_eq!(check_header(&encode_header()), Ok(()));
    }

    #[test]
    fn entry_round_trips_little_endian() {
        let e = entry(0x0403_0201, 0x0807_0605, 2, 3);
        let bytes = e.encode();
        assert_eq!(bytes, [1, 2, 3, 4, 5, 6, 7, 8, 2, 3]);
        assert_eq!(RawEntry::decode(&bytes), e);
        let typed = e.validate(0, u64::MAX).unwrap();
        assert_eq!(typed.record_type, RecordType::AssistantFinal);
        assert_eq!(typed.backend_format, BackendFormat::OpenAiResponses);
        assert_eq!(typed.encode(), bytes);
    }

    #[test]
    fn record_type_and_backend_format_conversions() {
        for (byte, ty) in [
            (1, RecordType::User),
            (2, RecordType::AssistantFinal),
            (3, RecordType::AssistantTool),
            (4, RecordType::ToolResult),
        ] {
            assert_eq!(RecordType::try_from(byte), Ok(ty));
            assert_eq!(u8::from(ty), byte);
        }
        assert_eq!(RecordType::try_from(0), Err(InvalidRecordType(0)));
        assert_eq!(RecordType::try_from(5), Err(InvalidRecordType(5)));
        assert!(RecordType::ToolResult.is_tool());
        assert!(!RecordType::AssistantFinal.is_tool());
        for byte in 0..=3u8 {
            assert_eq!(BackendFormat::try_from(byte).map(u8::from), Ok(byte));
        }
        assert_eq!(BackendFormat::try_from(4), Err(InvalidBackendFormat(4)));
        assert_eq!(
            BackendFormat::from_backend_type("anthropic_compatible"),
            BackendFormat::AnthropicCompatible
        );
        assert_eq!(
            BackendFormat::from_backend_type("custom"),
            BackendFormat::Unknown
        );
        assert_eq!(
            BackendFormat::OpenAiResponses.backend_type(),
            Some("openai_responses")
        );
        assert!(!BackendFormat::Unknown.is_known());
    }

    #[test]
    fn a_valid_index_validates_and_iterates() {
        let idx = index_of(&[entry(0, 10, 1, 1), entry(10, 20, 2, 1), entry(30, 5, 4, 0)]);
        assert_eq!(validate_index(&idx, 35), Ok(3));
        let all: Vec<Entry> = entries(&idx, 35).collect();
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].record_type, RecordType::ToolResult);
        assert_eq!(all[1].body_len(), 19);
        assert_eq!(all[1].newline_offset(), 29);
        assert_eq!(all[1].end(), 30);
    }

    #[test]
    fn an_empty_index_is_valid_only_with_an_empty_log() {
        let idx = index_of(&[]);
        assert_eq!(validate_index(&idx, 0), Ok(0));
        assert_eq!(
            validate_index(&idx, 3),
            Err(ChdxError::NoEntriesForData { data_size_bytes: 3 })
        );
    }

    #[test]
    fn header_errors_are_precise() {
        assert_eq!(
            validate_index(b"CHD", 0),
            Err(ChdxError::HeaderTruncated { len_bytes: 3 })
        );
        let mut idx = index_of(&[]);
        idx[0] = b'X';
        assert!(matches!(
            validate_index(&idx, 0),
            Err(ChdxError::BadMagic { found }) if found == 0x5844_4858
        ));
        let mut idx = index_of(&[]);
        idx[4] = 2;
        assert_eq!(
            validate_index(&idx, 0),
            Err(ChdxError::UnsupportedVersion { found: 2 })
        );
        let mut idx = index_of(&[]);
        idx[6] = 12;
        assert_eq!(
            validate_index(&idx, 0),
            Err(ChdxError::BadEntrySize { found: 12 })
        );
    }

    #[test]
    fn a_partial_entry_is_rejected() {
        let mut idx = index_of(&[entry(0, 10, 1, 0)]);
        idx.extend_from_slice(&[0, 0, 0]);
        assert_eq!(
            validate_index(&idx, 10),
            Err(ChdxError::PartialEntry { trailing_bytes: 3 })
        );
        assert_eq!(
            entry_count(8 + 25),
            Err(ChdxError::PartialEntry { trailing_bytes: 5 })
        );
        assert_eq!(entry_count(8 + 30), Ok(3));
        assert_eq!(
            entry_count(7),
            Err(ChdxError::HeaderTruncated { len_bytes: 7 })
        );
    }

    #[test]
    fn bad_fields_name_the_entry() {
        let idx = index_of(&[entry(0, 10, 1, 0), entry(10, 10, 7, 0)]);
        assert_eq!(
            validate_index(&idx, 20),
            Err(ChdxError::BadRecordType { entry: 1, found: 7 })
        );
        let idx = index_of(&[entry(0, 10, 0, 0)]);
        assert_eq!(
            validate_index(&idx, 10),
            Err(ChdxError::BadRecordType { entry: 0, found: 0 })
        );
        let idx = index_of(&[entry(0, 10, 2, 4)]);
        assert_eq!(
            validate_index(&idx, 10),
            Err(ChdxError::BadBackendFormat { entry: 0, found: 4 })
        );
    }

    #[test]
    fn bounds_errors_name_the_entry() {
        let idx = index_of(&[entry(0, 10, 1, 0), entry(10, 0, 2, 0)]);
        assert_eq!(
            validate_index(&idx, 20),
            Err(ChdxError::ZeroLength { entry: 1 })
        );
        let idx = index_of(&[entry(0, 10, 1, 0), entry(10, 11, 2, 0)]);
        assert_eq!(
            validate_index(&idx, 20),
            Err(ChdxError::OutOfBounds {
                entry: 1,
                offset: 10,
                length: 11,
                data_size_bytes: 20
            })
        );
        // An entry ending exactly at the end of the log is fine.
        let idx = index_of(&[entry(0, 10, 1, 0), entry(10, 10, 2, 0)]);
        assert_eq!(validate_index(&idx, 20), Ok(2));
    }

    #[test]
    fn offset_plus_length_cannot_overflow() {
        let idx = index_of(&[entry(u32::MAX, u32::MAX, 1, 0)]);
        assert!(matches!(validate_index(&idx, u64::MAX), Ok(1)));
        assert!(matches!(
            validate_index(&idx, u64::from(u32::MAX)),
            Err(ChdxError::OutOfBounds { entry: 0, .. })
        ));
    }

    #[test]
    fn field_errors_come_before_bounds_errors_as_in_esp_claw() {
        let idx = index_of(&[entry(0, 99, 1, 0), entry(0, 1, 9, 0)]);
        assert_eq!(
            validate_index(&idx, 10),
            Err(ChdxError::BadRecordType { entry: 1, found: 9 })
        );
    }

    #[test]
    fn entry_for_body_counts_the_newline() {
        let e = Entry::for_body(5, 9, RecordType::User, BackendFormat::Unknown).unwrap();
        assert_eq!(e.length, 10);
        assert_eq!(e.body_len(), 9);
        assert!(Entry::for_body(
            0,
            u32::MAX as usize,
            RecordType::User,
            BackendFormat::Unknown
        )
        .is_none());
    }

    #[test]
    fn every_entry_byte_pattern_is_handled() {
        // Exhaustive over the type/format bytes, a few bounds; never panics.
        for t in 0..=255u8 {
            for f in 0..=255u8 {
                let raw = entry(3, 4, t, f);
                let r = raw.validate(0, 7);
                assert_eq!(r.is_ok(), (1..=4).contains(&t) && f <= 3);
            }
        }
    }

    #[test]
    fn errors_display_what_was_wrong() {
        use std::string::ToString;
        let text = ChdxError::OutOfBounds {
            entry: 2,
            offset: 10,
            length: 20,
            data_size_bytes: 25,
        }
        .to_string();
        assert!(text.contains("entry 2"));
        assert!(text.contains("25-byte log"));
        assert!(ChdxError::BadBackendFormat { entry: 1, found: 9 }
            .to_string()
            .contains("backend format 9"));
    }

    #[test]
    fn every_error_message_in_full() {
        use std::string::ToString;
        let cases: [(ChdxError, &str); 10] = [
            (
                ChdxError::HeaderTruncated { len_bytes: 3 },
                "session index is 3 bytes, shorter than its 8-byte header",
            ),
            (
                ChdxError::BadMagic { found: 0xAB },
                "session index magic is 0x000000ab, expected 0x58444843 (\"CHDX\")",
            ),
            (
                ChdxError::UnsupportedVersion { found: 7 },
                "session index version 7 is not supported (expected 1)",
            ),
            (
                ChdxError::BadEntrySize { found: 12 },
                "session index entry size is 12, expected 10",
            ),
            (
                ChdxError::PartialEntry { trailing_bytes: 4 },
                "session index ends with a partial entry of 4 bytes",
            ),
            (
                ChdxError::BadRecordType { entry: 5, found: 9 },
                "session index entry 5: invalid record type 9 (expected 1 to 4)",
            ),
            (
                ChdxError::BadBackendFormat { entry: 6, found: 8 },
                "session index entry 6: invalid backend format 8 (expected 0 to 3)",
            ),
            (
                ChdxError::NoEntriesForData {
                    data_size_bytes: 99,
                },
                "session index has no entries but the log holds 99 bytes",
            ),
            (
                ChdxError::ZeroLength { entry: 0 },
                "session index entry 0: length is 0",
            ),
            (
                ChdxError::OutOfBounds {
                    entry: 2,
                    offset: 10,
                    length: 20,
                    data_size_bytes: 25,
                },
                "session index entry 2: offset 10 + length 20 is past the end of the 25-byte log",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }
}
