//! Unit tests of the ordering-state codec.

use super::*;

fn topic(last: u8) -> TopicId {
    let mut t = [0u8; 16];
    t[7] = 1;
    t[15] = last;
    t
}

fn sample() -> HeldMessage {
    HeldMessage {
        timestamp_ms: 1_700_000_000_123,
        key: Some(b"k".to_vec()),
        value: None,
        headers: vec![("a".into(), Some(b"xy".to_vec())), ("\u{e9}".into(), None)],
        causes: vec![
            (Channel::new(topic(1), 3), 41),
            (Channel::new(topic(2), 0), 7),
        ],
    }
}

#[test]
fn held_round_trip_and_layout() {
    let m = sample();
    let blob = encode_held(&m);
    assert_eq!(
        blob.len(),
        held_size(Some(b"k"), None, &[("a", Some(b"xy")), ("\u{e9}", None)], 2)
    );
    assert_eq!(blob[0], 1);
    assert_eq!(blob[9], FLAG_VALUE_NULL);
    assert_eq!(&blob[10..15], &[0, 0, 0, 1, b'k']);
    assert_eq!(decode_held(&blob).unwrap().to_owned(), m);
    validate_held(&blob).unwrap();
    let empty = HeldMessage {
        timestamp_ms: -1,
        key: None,
        value: Some(vec![]),
        ..Default::default()
    };
    let blob = encode_held(&empty);
    assert_eq!(blob.len(), 1 + 8 + 1 + 4 + 4 + 4);
    assert_eq!(decode_held(&blob).unwrap().to_owned(), empty);
}

#[test]
fn keys_are_tag_channel_position_big_endian() {
    let mut id = [0u8; 16];
    id[15] = 0x0b;
    let c = Channel::new(id, 2);
    let key = held_key(&c, 258);
    assert_eq!(key[0], b'h');
    assert_eq!(&key[1..17], &id);
    assert_eq!(&key[17..21], &[0, 0, 0, 2]);
    assert_eq!(&key[21..29], &[0, 0, 0, 0, 0, 0, 1, 2]);
    assert_eq!(&fed_key(&c)[1..], &key[1..21]);
    assert_eq!(fed_key(&c)[0], b'f');
}

/// The byte layout docs/model.md gives for a held blob, with the key-null flag and a
/// null header value.
#[test]
fn held_blob_layout() {
    let blob = encode_held_parts(5, None, Some(b"v"), &[("x", None)], &[]);
    let mut want = vec![1u8];
    want.extend_from_slice(&5i64.to_be_bytes());
    want.push(1); // key null
    want.extend_from_slice(&1i32.to_be_bytes());
    want.push(b'v');
    want.extend_from_slice(&1i32.to_be_bytes());
    want.extend_from_slice(&1i32.to_be_bytes());
    want.push(b'x');
    want.extend_from_slice(&(-1i32).to_be_bytes());
    want.extend_from_slice(&0i32.to_be_bytes());
    assert_eq!(blob, want);
}

fn held_err(blob: &[u8]) -> String {
    let e = decode_held(blob).unwrap_err();
    assert_eq!(validate_held(blob).unwrap_err(), e);
    e.strip_prefix(CORRUPT_HELD).expect("prefix").to_string()
}

#[test]
fn held_refusals() {
    assert_eq!(held_err(b""), "truncated at 0 bytes");
    assert_eq!(held_err(b"\x01\x00"), "truncated at 2 bytes");
    assert_eq!(held_err(b"\x02\x00"), "version 2");
    let mut head = vec![1u8, 0, 0, 0, 0, 0, 0, 0, 5];
    head.push(4);
    assert_eq!(held_err(&head), "flags 0x04 carry unknown bits");
    head[9] = 0;
    assert_eq!(held_err(&head), "truncated at key length");
    let mut b = head.clone();
    b.extend_from_slice(&(-2i32).to_be_bytes());
    assert_eq!(held_err(&b), "key length -2 with 0 bytes remaining");
    head[9] = 3;
    assert_eq!(held_err(&head), "truncated at header count");
    let mut b = head.clone();
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&[0; 7]);
    assert_eq!(held_err(&b), "header count 1 with 7 bytes remaining");
    let mut b = head.clone();
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes());
    b.push(0xff);
    b.extend_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(held_err(&b), "header key is not UTF-8");
    let mut b = head.clone();
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes());
    b.push(0xff);
    b.extend_from_slice(&(-5i32).to_be_bytes());
    assert_eq!(
        held_err(&b),
        "header value length -5 with 0 bytes remaining"
    );
    let mut b = head.clone();
    b.extend_from_slice(&0i32.to_be_bytes());
    assert_eq!(held_err(&b), "truncated at cause count");
    b.extend_from_slice(&1i32.to_be_bytes());
    assert_eq!(
        held_err(&b),
        "cause count 1 does not match 0 bytes remaining"
    );
    let mut c = b.clone();
    c.extend_from_slice(&topic(1));
    c.extend_from_slice(&(-1i32).to_be_bytes());
    c.extend_from_slice(&0i64.to_be_bytes());
    assert_eq!(held_err(&c), "cause names negative partition -1");
}

fn long(v: i64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

#[test]
fn image_loads_and_refuses() {
    let ch = Channel::new(topic(1), 0);
    let blob = encode_held(&sample());
    let items: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (frontier_key(&ch).to_vec(), long(5)),
        (fed_key(&ch).to_vec(), long(9)),
        (held_key(&ch, 7).to_vec(), blob.clone()),
        (held_key(&ch, 9).to_vec(), blob.clone()),
        (name_key("orders"), encode_binding(&topic(1)).to_vec()),
        (past_key(&ch).to_vec(), long(3)),
        (b"v".to_vec(), b"\x01".to_vec()),
    ];
    let image = load_image(items.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).unwrap();
    assert!(image.has_version);
    assert_eq!(image.fed.get(&ch), Some(&9));
    assert_eq!(image.held.get(&ch), Some(&vec![7, 9]));
    assert_eq!(image.names.get(&"orders".to_string()), Some(&topic(1)));

    let load = |items: &[(Vec<u8>, Vec<u8>)]| {
        load_image(items.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
    };
    // Without the version: the lost head, whatever else is wrong.
    let no_version: Vec<_> = items[..6].to_vec();
    assert!(load(&no_version)
        .unwrap_err()
        .starts_with("ordering state present without"));
    let mut bad = no_version.clone();
    bad[0].1 = long(-1);
    assert!(load(&bad)
        .unwrap_err()
        .starts_with("ordering state present without"));
    bad.push((b"v".to_vec(), b"\x02".to_vec()));
    assert_eq!(load(&bad).unwrap_err(), UNKNOWN_VERSION);
    let mut bad = items.clone();
    bad[0].1 = long(-1);
    assert_eq!(
        load(&bad).unwrap_err(),
        format!(
            "restored frontier names position -1 on {ch}, which no channel can assign; \
             {CORRUPT_ROW}"
        )
    );
    let mut bad = items.clone();
    bad[1].1 = long(8);
    assert_eq!(
        load(&bad).unwrap_err(),
        format!(
            "held messages restored out of position order: held message at {ch}@9 above its \
             channel's coverage (fedUpTo=8); {}",
            held_unfed()
        )
    );
    let mut bad = items.clone();
    bad[3].0 = held_key(&ch, 7).to_vec();
    assert!(load(&bad)
        .unwrap_err()
        .starts_with("held messages restored out of position"));
    let bad = vec![(vec![b'z', 1], vec![]), (b"v".to_vec(), b"\x01".to_vec())];
    assert_eq!(
        load(&bad).unwrap_err(),
        "corrupt ordering key: unknown tag 'z'"
    );
    let bad = vec![(vec![0x7f], vec![]), (b"v".to_vec(), b"\x01".to_vec())];
    assert_eq!(
        load(&bad).unwrap_err(),
        "corrupt ordering key: unknown tag 0x7f"
    );
    assert!(load(&[]).unwrap().is_empty());
}
