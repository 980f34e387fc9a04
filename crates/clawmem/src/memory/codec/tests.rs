//! Tests of the item encoding.

extern crate std;
use std::vec;
use std::vec::Vec;

use super::super::item::{ItemInput, LabelLimit};
use super::*;

fn sample() -> Item {
    let mut item = Item::new(
        ItemId::new(0x0102_0304),
        &ItemInput::new("User 喜欢绿茶 and \"tea\"")
            .tags("drinks, 饮食偏好; health")
            .keywords("绿茶")
            .source("auto_llm"),
        0x0A0B_0C0D,
        LabelLimit::DEFAULT,
    )
    .unwrap();
    item.set_access_count(0x1234);
    item.set_updated_at(0x1122_3344);
    item
}

/// An item stored from this content, tags and keywords at time 100.
fn stored(id: u32, content: &str, tags: &str, keywords: &str, limit: LabelLimit) -> Item {
    Item::new(
        ItemId::new(id),
        &ItemInput::new(content).tags(tags).keywords(keywords),
        100,
        limit,
    )
    .unwrap()
}

fn encode(item: &Item) -> Vec<u8> {
    let mut buf = vec![0u8; ITEM_ENCODED_MAX_BYTES];
    let n = item.encode(&mut buf).unwrap();
    assert_eq!(n, item.encoded_len());
    buf.truncate(n);
    buf
}

#[test]
fn roundtrip() {
    let item = sample();
    let bytes = encode(&item);
    assert_eq!(Item::decode(&bytes), Ok(item));
}

/// The version 1 layout, as the engine of format 5 wrote it (test
/// fixtures: the engine reads version 1 and writes version 2).
fn encode_v1(item: &Item) -> Vec<u8> {
    let mut b = vec![1u8, 0];
    b.extend_from_slice(&item.id.get().to_le_bytes());
    b.extend_from_slice(&item.created_at.to_le_bytes());
    b.extend_from_slice(&item.updated_at.to_le_bytes());
    b.extend_from_slice(&item.access_count.to_le_bytes());
    b.push(item.source.len() as u8);
    b.extend_from_slice(&(item.content.len() as u16).to_le_bytes());
    b.extend_from_slice(&[
        item.tags.len() as u8,
        item.keywords.len() as u8,
        item.labels.len() as u8,
    ]);
    for f in [&item.source[..], &item.content, &item.tags, &item.keywords] {
        b.extend_from_slice(f.as_bytes());
    }
    for l in &item.labels {
        b.push(l.len() as u8);
        b.extend_from_slice(l.as_bytes());
    }
    b
}

#[test]
fn header_layout_is_little_endian() {
    let bytes = encode(&sample());
    assert_eq!(bytes[0], ITEM_FORMAT_VERSION);
    // updated_at and access_count present, source "auto_llm" (code 1),
    // three keyword pieces ("绿茶" topped up with two tags).
    assert_eq!(
        bytes[1],
        F_UPDATED | F_ACCESS | 1 << F_SOURCE_SHIFT | 3 << F_PIECES_SHIFT
    );
    assert_eq!(&bytes[2..6], &[4, 3, 2, 1]);
    assert_eq!(&bytes[6..10], &[0x0D, 0x0C, 0x0B, 0x0A]);
    assert_eq!(&bytes[10..14], &[0x44, 0x33, 0x22, 0x11]);
    assert_eq!(&bytes[14..16], &[0x34, 0x12]);
    let content = "User 喜欢绿茶 and \"tea\"";
    assert_eq!(usize::from(bytes[16]), content.len() - 1);
    assert_eq!(&bytes[17..17 + content.len()], content.as_bytes());
}

#[test]
fn version_1_items_still_decode() {
    let item = sample();
    let v1 = encode_v1(&item);
    assert_eq!(
        v1.len(),
        22 + 8
            + item.content.len()
            + item.tags.len()
            + item.keywords.len()
            + item.labels.iter().map(|l| 1 + l.len()).sum::<usize>()
    );
    assert_eq!(Item::decode(&v1), Ok(item.clone()));
    // Re-encoded, it is version 2 and shorter.
    let v2 = encode(&item);
    assert_eq!(v2[0], 2);
    assert!(v2.len() < v1.len());
    for len in 0..v1.len() {
        assert!(
            Item::decode(&v1[..len]).is_err(),
            "v1 prefix {len} accepted"
        );
    }
}

#[test]
fn references_replace_what_the_item_holds_twice() {
    // Keywords from the content (exact and lowercased), from the tags,
    // and one literal; labels from the tags.
    let item = stored(
        9,
        "Michael lives in Seattle and likes hiking",
        "first_time_inquiry, customer",
        "michael, seattle, customer",
        LabelLimit::DEFAULT,
    );
    assert_eq!(item.keywords(), "michael,seattle,customer");
    let bytes = encode(&item);
    let content = item.content.len();
    let tags = item.tags.len();
    // 10 fixed, content and tags with their lengths, the label count,
    // three keyword references (3 + 3 + 1) and two labels (1 each).
    assert_eq!(bytes.len(), 10 + 1 + content + 1 + tags + 1 + 7 + 2);
    let kw = 10 + 1 + content + 1 + tags + 1;
    assert_eq!(
        &bytes[kw..kw + 7],
        &[KW_CONTENT_LOWER, 0, 7, KW_CONTENT_LOWER, 17, 7, KW_TAG + 1]
    );
    assert_eq!(&bytes[kw + 7..], &[18, 1 << 6 | 8]);
    assert_eq!(Item::decode(&bytes), Ok(item.clone()));

    // An exact occurrence wins over a lowercased one; a piece of two
    // bytes is a literal; ESP-Claw's 8-character labels are prefixes.
    let item = stored(
        10,
        "tea: green tea, TEA",
        "dietary_preferences",
        "tea, gr",
        LabelLimit::ESP_CLAW,
    );
    let bytes = encode(&item);
    let kw = 10 + 1 + item.content.len() + 1 + item.tags.len() + 1;
    assert_eq!(&bytes[kw..], &[KW_CONTENT, 0, 3, 2, b'g', b'r', KW_TAG, 8]);
    assert_eq!(Item::decode(&bytes), Ok(item));
}

#[test]
fn fields_that_fit_no_reference_are_written_out() {
    let mut item = sample();
    // A label that no tag term starts with, a source without a code,
    // and keywords of four pieces (an item read from version 1 may have
    // any keywords string).
    item.labels.clear();
    let _ = item.labels.push(crate::memory::text::to_fixed("elsewhere"));
    item.source = crate::memory::text::to_fixed("import");
    item.keywords = crate::memory::text::to_fixed("a,b,c,d");
    let bytes = encode(&item);
    assert_eq!(bytes[1] & F_KEYWORDS_WHOLE, F_KEYWORDS_WHOLE);
    assert_eq!(bytes[1] >> F_SOURCE_SHIFT & 3, 0);
    assert!(bytes.ends_with(b"\x07a,b,c,d\xC9elsewhere"));
    assert_eq!(Item::decode(&bytes), Ok(item));
}

#[test]
fn another_choice_of_references_is_refused() {
    let item = stored(9, "likes hiking", "hiking", "hiking", LabelLimit::DEFAULT);
    let good = encode(&item);
    // The keyword as a literal instead of a tag reference.
    let kw = good.len() - 2;
    assert_eq!(&good[kw..], &[KW_TAG, 6]);
    let mut literal = good[..kw].to_vec();
    literal.extend_from_slice(b"\x06hiking");
    literal.push(6);
    assert_eq!(Item::decode(&literal), Err(DecodeError::NotCanonical));
    // The same through the content.
    let mut content = good[..kw].to_vec();
    content.extend_from_slice(&[KW_CONTENT, 6, 6, 6]);
    assert_eq!(Item::decode(&content), Err(DecodeError::NotCanonical));
    // updated_at written out although it equals created_at.
    let mut updated = good.clone();
    updated[1] |= F_UPDATED;
    updated.splice(10..10, 100u32.to_le_bytes());
    assert_eq!(Item::decode(&updated), Err(DecodeError::NotCanonical));
    // A reference past the content, or to a tag term that is not there.
    let mut past = good[..kw].to_vec();
    past.extend_from_slice(&[KW_CONTENT, 10, 6, 6]);
    assert_eq!(
        Item::decode(&past),
        Err(DecodeError::BadReference(ItemField::Keywords))
    );
    let mut tag = good.clone();
    *tag.last_mut().unwrap() = 1 << 6 | 6;
    assert_eq!(
        Item::decode(&tag),
        Err(DecodeError::BadReference(ItemField::Label))
    );
}

#[test]
fn largest_item_fits_the_max_size() {
    let content = "x".repeat(CONTENT_MAX_BYTES);
    let tags = std::format!("{},{},{}", "a".repeat(31), "b".repeat(31), "c".repeat(31));
    let keywords = std::format!(
        "{0},{1}",
        content.get(..64).unwrap(),
        content.get(..63).unwrap()
    );
    let item = Item::new(
        ItemId::new(u32::MAX),
        &ItemInput::new(&content)
            .tags(&tags)
            .keywords(&keywords)
            .source("sixteen_bytes_xx"),
        u32::MAX,
        LabelLimit::DEFAULT,
    )
    .unwrap();
    assert_eq!(item.tags().len(), TAGS_MAX_BYTES - 1);
    let bytes = encode(&item);
    assert!(bytes.len() <= ITEM_ENCODED_MAX_BYTES);
    assert_eq!(Item::decode(&bytes), Ok(item));
}

#[test]
fn items_filling_the_capacities_still_decode() {
    // Items written before fields were cut as ESP-Claw's arrays hold them
    // (255/95/127/15 bytes) may fill the capacities: they still decode.
    let mut item = Item::new(ItemId::new(7), &ItemInput::new("x"), 1, LabelLimit::DEFAULT).unwrap();
    item.content = crate::memory::Content::new();
    let _ = item.content.push_str(&"y".repeat(CONTENT_MAX_BYTES));
    item.tags = crate::memory::Tags::new();
    let _ = item.tags.push_str(&"t".repeat(TAGS_MAX_BYTES));
    item.keywords = crate::memory::Keywords::new();
    let _ = item.keywords.push_str(&"k".repeat(KEYWORDS_MAX_BYTES));
    item.source = crate::memory::Source::new();
    let _ = item.source.push_str(&"s".repeat(SOURCE_MAX_BYTES));
    let bytes = encode(&item);
    assert!(bytes.len() <= ITEM_ENCODED_MAX_BYTES);
    assert_eq!(Item::decode(&bytes), Ok(item));
}

#[test]
fn short_buffer_is_an_error_and_untouched() {
    let item = sample();
    let mut buf = vec![0xAAu8; item.encoded_len() - 1];
    assert_eq!(
        item.encode(&mut buf),
        Err(EncodeError::BufferTooSmall {
            needed: item.encoded_len()
        })
    );
    assert!(buf.iter().all(|&b| b == 0xAA));
}

#[test]
fn every_truncation_is_rejected() {
    let bytes = encode(&sample());
    for len in 0..bytes.len() {
        assert!(
            Item::decode(&bytes[..len]).is_err(),
            "prefix {len} accepted"
        );
    }
}

#[test]
fn specific_corruptions_are_named() {
    let good = encode(&sample());
    let with = |at: usize, value: u8| {
        let mut b = good.clone();
        b[at] = value;
        Item::decode(&b)
    };
    assert_eq!(with(0, 3), Err(DecodeError::UnsupportedVersion(3)));
    assert_eq!(
        with(1, good[1] | 0x80),
        Err(DecodeError::ReservedFlags(good[1] | 0x80))
    );
    assert_eq!(
        with(1, good[1] | 3 << F_SOURCE_SHIFT),
        Err(DecodeError::ReservedFlags(good[1] | 3 << F_SOURCE_SHIFT))
    );
    // An invalid UTF-8 byte inside the content (which starts at 17).
    assert_eq!(
        with(17 + 8, 0xFF),
        Err(DecodeError::InvalidUtf8(ItemField::Content))
    );
    // Leading space in the content.
    assert_eq!(with(17, b' '), Err(DecodeError::UntrimmedContent));
    let tags_at = 17 + usize::from(good[16]) + 1;
    assert_eq!(
        with(tags_at, 97),
        Err(DecodeError::TooLong(ItemField::Tags))
    );
    let tags_end = tags_at + 1 + usize::from(good[tags_at]);
    assert_eq!(with(tags_end, 4), Err(DecodeError::TooManyLabels(4)));
    assert_eq!(
        with(tags_end + 1, 0x7F),
        Err(DecodeError::BadReference(ItemField::Keywords))
    );

    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(Item::decode(&trailing), Err(DecodeError::TrailingBytes));

    // Version 1's fields, as before.
    let v1 = encode_v1(&sample());
    let with = |at: usize, value: u8| {
        let mut b = v1.clone();
        b[at] = value;
        Item::decode(&b)
    };
    assert_eq!(with(1, 0x80), Err(DecodeError::ReservedFlags(0x80)));
    assert_eq!(with(16, 17), Err(DecodeError::TooLong(ItemField::Source)));
    assert_eq!(
        with(18, 0xFF),
        Err(DecodeError::TooLong(ItemField::Content))
    );
    assert_eq!(with(19, 97), Err(DecodeError::TooLong(ItemField::Tags)));
    assert_eq!(
        with(20, 129),
        Err(DecodeError::TooLong(ItemField::Keywords))
    );
    assert_eq!(with(21, 4), Err(DecodeError::TooManyLabels(4)));
    assert_eq!(
        with(22 + 8, 0xFF),
        Err(DecodeError::InvalidUtf8(ItemField::Content))
    );
    assert_eq!(with(22 + 8, b' '), Err(DecodeError::UntrimmedContent));
}

#[test]
fn invariant_violations_are_rejected() {
    // Hand-built: empty source, 1-byte content, no tags/keywords/labels.
    let mut b = vec![1, 0];
    b.extend_from_slice(&[0; 12]);
    b.extend_from_slice(&[0, 0]);
    b.push(0); // source_len
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&[0, 0, 0]);
    b.push(b'x');
    assert_eq!(Item::decode(&b), Err(DecodeError::Empty(ItemField::Source)));

    // Empty content.
    let mut b = vec![1, 0];
    b.extend_from_slice(&[0; 14]);
    b.push(1);
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&[0, 0, 0]);
    b.push(b'm');
    assert_eq!(
        Item::decode(&b),
        Err(DecodeError::Empty(ItemField::Content))
    );

    // Two equal labels, then an empty one.
    let mut base = vec![1, 0];
    base.extend_from_slice(&[0; 14]);
    base.push(1);
    base.extend_from_slice(&1u16.to_le_bytes());
    base.extend_from_slice(&[0, 0, 2]);
    base.extend_from_slice(b"mx");
    let mut dup = base.clone();
    dup.extend_from_slice(&[1, b'a', 1, b'a']);
    assert_eq!(Item::decode(&dup), Err(DecodeError::DuplicateLabel));
    let mut empty = base.clone();
    empty.extend_from_slice(&[1, b'a', 0]);
    assert_eq!(
        Item::decode(&empty),
        Err(DecodeError::Empty(ItemField::Label))
    );
    let mut too_long = base;
    too_long.extend_from_slice(&[33]);
    too_long.extend_from_slice(&[b'a'; 33]);
    assert_eq!(
        Item::decode(&too_long),
        Err(DecodeError::TooLong(ItemField::Label))
    );
}

#[test]
fn no_byte_pattern_panics() {
    // Every single-byte change and a deterministic pseudo-random sweep:
    // decode returns, and anything it accepts re-encodes to the same bytes.
    let good = encode(&sample());
    let check = |bytes: &[u8]| {
        if let Ok(item) = Item::decode(bytes) {
            if bytes[0] == 1 {
                assert_eq!(encode_v1(&item), bytes);
                assert_eq!(Item::decode(&encode(&item)), Ok(item));
            } else {
                assert_eq!(encode(&item), bytes);
            }
        }
    };
    for good in [good, encode_v1(&sample())] {
        for at in 0..good.len() {
            for value in [0u8, 1, 0x7F, 0x80, 0xC3, 0xFF] {
                let mut b = good.clone();
                b[at] = value;
                check(&b);
            }
        }
    }
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for round in 0..40_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = (state % 96) as usize;
        let mut b: Vec<u8> = (0..len)
            .map(|i| (state.rotate_left(i as u32 * 5) & 0xFF) as u8)
            .collect();
        if let Some(v) = b.first_mut() {
            *v = 1 + (round & 1) as u8;
        }
        if let Some(f) = b.get_mut(1) {
            // Version 2: a plausible flags byte.
            *f = if round & 1 == 0 { 0 } else { *f & 0x7F };
        }
        check(&b);
    }
}

#[test]
fn lowercased_reference_keeps_non_ascii_bytes() {
    // Only ASCII letters are lowercased when a content reference is read
    // back: `É` stays as it is, `C` becomes `c`.
    let item = stored(11, "Visit CAFÉ Zoë", "", "cafÉ", LabelLimit::DEFAULT);
    assert_eq!(item.keywords(), "cafÉ");
    let bytes = encode(&item);
    let kw = 10 + 1 + item.content.len() + 1 + item.tags.len() + 1;
    assert_eq!(&bytes[kw..], &[KW_CONTENT_LOWER, 6, 5]);
    assert_eq!(Item::decode(&bytes), Ok(item));
}
