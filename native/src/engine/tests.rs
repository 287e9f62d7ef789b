//! Unit tests of the engine core with an in-memory host: delivery gated by causes, held
//! release through the store, and the changelog image / restore round trip.

use std::collections::BTreeMap;

use super::*;
use crate::state_codec::{self, HeldRef};
use super::fx::FxSet;
use crate::wire::{decode_causes, encode_causes, Channel};

/// A payload: key, value, application headers.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Msg {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

fn msg(value: &str) -> Msg {
    Msg {
        key: Some(b"k".to_vec()),
        value: Some(value.as_bytes().to_vec()),
        headers: vec![("app".into(), Some(b"1".to_vec()))],
    }
}

/// The store is a sorted map, as the ordering store's key order.
#[derive(Default)]
struct TestHost {
    store: BTreeMap<Vec<u8>, Vec<u8>>,
    warnings: Vec<String>,
}

impl TestHost {
    fn commit(&mut self, core: &mut Core<Msg>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut rows = Vec::new();
        core.take_rows(self, &mut |k, v| {
            rows.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            Ok(())
        })
        .unwrap();
        for (k, v) in &rows {
            match v {
                Some(v) => self.store.insert(k.clone(), v.clone()),
                None => self.store.remove(k),
            };
        }
        rows
    }
}

impl Host for TestHost {
    type Payload = Msg;
    type Error = String;
    type Blob = Vec<u8>;

    fn describe(&mut self, ch: &Channel, position: Option<i64>) -> String {
        format!("{ch}@{position:?}")
    }
    fn describe_key(&mut self, payload: &Msg) -> Result<String, String> {
        Ok(format!("key {:?}", payload.key))
    }
    fn wants_warnings(&self) -> bool {
        true
    }
    fn warn(&mut self, text: String) -> Result<(), String> {
        self.warnings.push(text);
        Ok(())
    }
    fn held_blob(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(self.store.get(key).cloned())
    }
    fn payload(&mut self, held: &HeldRef<'_>) -> Result<Msg, String> {
        let owned = held.to_owned();
        Ok(Msg {
            key: owned.key,
            value: owned.value,
            headers: owned.headers,
        })
    }
    fn lend_parts(&mut self, m: &Msg, encode: &mut dyn FnMut(HeldParts<'_>)) -> Result<(), String> {
        let headers: Vec<(&str, Option<&[u8]>)> = m
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        encode(HeldParts {
            key: m.key.as_deref(),
            value: m.value.as_deref(),
            headers: &headers,
        });
        Ok(())
    }
}

fn ch(topic: u8, partition: i32) -> Channel {
    let mut id = [0u8; 16];
    id[15] = topic;
    Channel::new(id, partition)
}

const BUDGET: usize = 1 << 16;

/// Two received channels, A (rank 0) and B (rank 1), started at 0.
fn started(host: &mut TestHost) -> Core<Msg> {
    let mut core = Core::new(
        Config {
            budget: BUDGET,
            stamp_version: true,
            ..Config::default()
        },
        vec![ch(1, 0), ch(1, 1)],
    );
    core.restore(host, Restore::default()).unwrap();
    core.start::<String, _>(Vec::new()).unwrap();
    core
}

fn feed(
    core: &mut Core<Msg>,
    host: &mut TestHost,
    r: usize,
    q: i64,
    causes: &[(Channel, i64)],
) -> bool {
    let header = encode_causes(causes);
    let header = if causes.is_empty() {
        CausesHeader::Absent
    } else {
        CausesHeader::Value(&header)
    };
    core.feed(host, r, q, 100 + q, header, msg(&format!("{r}@{q}")))
        .unwrap()
}

fn deliver_all(core: &mut Core<Msg>, host: &mut TestHost) -> Vec<(usize, i64, Msg)> {
    let mut out = Vec::new();
    while let Some((r, q, held)) = core.deliver_one(host).unwrap() {
        out.push((r, q, held.payload));
    }
    out
}

fn order(delivered: &[(usize, i64, Msg)]) -> Vec<(usize, i64)> {
    delivered.iter().map(|(r, q, _)| (*r, *q)).collect()
}

#[test]
fn a_head_waits_for_its_causes_then_delivers() {
    let mut host = TestHost::default();
    let mut core = started(&mut host);
    assert!(feed(&mut core, &mut host, 1, 0, &[(ch(1, 0), 0)]));
    assert!(deliver_all(&mut core, &mut host).is_empty());
    assert_eq!(core.waited_count(), 1);
    assert_eq!(core.held_total(), 1);
    assert!(feed(&mut core, &mut host, 0, 0, &[]));
    let delivered = deliver_all(&mut core, &mut host);
    assert_eq!(order(&delivered), vec![(0, 0), (1, 0)]);
    assert_eq!(delivered[1].2, msg("1@0"));
    assert_eq!(core.held_total(), 0);
    // The frontier holds both delivered positions and the cause.
    let frontier: Vec<(Channel, i64)> = core.frontier().map(|(c, p)| (*c, p)).collect();
    assert_eq!(frontier, vec![(ch(1, 0), 0), (ch(1, 1), 0)]);
    let (_, header) = core.causes_header::<String>().unwrap();
    assert_eq!(header, encode_causes(&frontier).as_slice());
    assert_eq!(core.past().collect::<Vec<_>>(), vec![(&ch(1, 0), 0)]);
}

#[test]
fn a_cause_on_an_unreceived_channel_does_not_block_and_replays_drop() {
    let mut host = TestHost::default();
    let mut core = started(&mut host);
    assert!(feed(&mut core, &mut host, 0, 3, &[(ch(9, 0), 50)]));
    assert_eq!(order(&deliver_all(&mut core, &mut host)), vec![(0, 3)]);
    // At or below coverage, at the session floor: dropped (a restart's replay).
    let mut fresh = Core::new(
        Config {
            budget: BUDGET,
            ..Config::default()
        },
        vec![ch(1, 0)],
    );
    fresh
        .restore(
            &mut host,
            Restore {
                fed: vec![(ch(1, 0), 3)],
                ..Restore::default()
            },
        )
        .unwrap();
    fresh.start::<String, _>(Vec::new()).unwrap();
    assert!(!feed(&mut fresh, &mut host, 0, 2, &[]));
    // Fed out of order within one execution: refused.
    assert!(feed(&mut fresh, &mut host, 0, 5, &[]));
    let err = fresh
        .feed(&mut host, 0, 4, 0, CausesHeader::Absent, msg("x"))
        .unwrap_err();
    assert_eq!(
        err,
        Fault::Refused(Refusal::FedAfterPosition {
            ch: ch(1, 0),
            position: 4,
            fed_before: 5
        })
    );
    assert_eq!(
        Refusal::FedGoneChannel {
            ch: ch(1, 0),
            position: 4
        }
        .reason(),
        Reason::OutOfOrderFeed
    );
}

#[test]
fn refusals_before_start_and_of_bad_headers() {
    let mut host = TestHost::default();
    let mut core: Core<Msg> = Core::new(
        Config {
            budget: 30,
            ..Config::default()
        },
        vec![ch(1, 0)],
    );
    let err = core
        .feed(&mut host, 0, 0, 0, CausesHeader::Absent, msg("x"))
        .unwrap_err();
    assert!(matches!(err, Fault::Misuse(_)));
    core.start::<String, _>(Vec::new()).unwrap();
    assert!(matches!(
        core.start::<String, _>(Vec::new()),
        Err(Fault::Misuse(_))
    ));
    for header in [
        CausesHeader::Duplicate,
        CausesHeader::Null,
        CausesHeader::Value(b"\x02"),
    ] {
        let err = core.feed(&mut host, 0, 0, 0, header, msg("x")).unwrap_err();
        assert!(matches!(
            err,
            Fault::Refused(ref r) if r.reason() == Reason::UndecodableMetadata
        ));
    }
    let big = encode_causes(&[(ch(2, 0), 1), (ch(3, 0), 1)]);
    let err = core
        .feed(&mut host, 0, 0, 0, CausesHeader::Value(&big), msg("x"))
        .unwrap_err();
    assert!(matches!(
        err,
        Fault::Refused(ref r) if r.reason() == Reason::MetadataBudgetExceeded
    ));
    assert_eq!(header_role("parsley.causes"), HeaderRole::Causes);
    assert_eq!(header_role("parsley.x"), HeaderRole::Reserved);
    assert_eq!(header_role("app"), HeaderRole::Application);
    assert!(!encodable_position(i64::MAX) && !encodable_position(-1) && encodable_position(0));
}

#[test]
fn a_held_body_written_at_commit_is_read_back_from_the_store_and_released() {
    let mut host = TestHost::default();
    let mut core = started(&mut host);
    assert!(feed(&mut core, &mut host, 1, 4, &[(ch(1, 0), 2)]));
    assert!(deliver_all(&mut core, &mut host).is_empty());
    let rows = host.commit(&mut core);
    let held_key = state_codec::held_key(&ch(1, 1), 4).to_vec();
    assert_eq!(rows[0], (b"v".to_vec(), Some(b"\x01".to_vec())));
    assert_eq!(rows[1].0, held_key);
    // The row is the one held-blob encoding of the body.
    let want = state_codec::encode_held_parts(
        104,
        Some(b"k"),
        Some(b"1@4"),
        &[("app", Some(b"1"))],
        &[(ch(1, 0), 2)],
    );
    assert_eq!(rows[1].1.as_deref(), Some(want.as_slice()));
    assert_eq!(core.unpersisted().count(), 0);
    // A reserved header in a stored blob (as another writer may leave) never reaches the
    // application.
    let with_reserved = state_codec::encode_held_parts(
        104,
        Some(b"k"),
        Some(b"1@4"),
        &[("parsley.causes", Some(b"\x01\x00")), ("app", Some(b"1"))],
        &[(ch(1, 0), 2)],
    );
    host.store.insert(held_key.clone(), with_reserved);
    for q in 0..3 {
        assert!(feed(&mut core, &mut host, 0, q, &[]));
    }
    let delivered = deliver_all(&mut core, &mut host);
    assert_eq!(order(&delivered), vec![(0, 0), (0, 1), (0, 2), (1, 4)]);
    assert_eq!(delivered[3].2, msg("1@4"));
    assert_eq!(core.loaded_at(), None);
    // The delivered body's row is deleted at the next commit.
    let rows = host.commit(&mut core);
    assert!(rows.contains(&(held_key.clone(), None)));
    assert!(!host.store.contains_key(&held_key));
}

#[test]
fn a_missing_held_row_refuses() {
    let mut host = TestHost::default();
    let mut core = started(&mut host);
    assert!(feed(&mut core, &mut host, 1, 0, &[(ch(1, 0), 0)]));
    host.commit(&mut core);
    host.store.clear();
    assert!(feed(&mut core, &mut host, 0, 0, &[]));
    let err = deliver_all_result(&mut core, &mut host).unwrap_err();
    assert!(matches!(
        err,
        Fault::Refused(ref r) if r.reason() == Reason::UnknownOrderingStateFormat
    ));
}

fn deliver_all_result(core: &mut Core<Msg>, host: &mut TestHost) -> Result<usize, Fault<String>> {
    let mut n = 0;
    while core.deliver_one(host)?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// The rows a commit writes load back (`state_codec::load_image`) into an image from
/// which a new engine restores the same state and delivers the held messages.
#[test]
fn image_and_restore_round_trip() {
    let mut host = TestHost::default();
    let mut core = started(&mut host);
    assert!(feed(&mut core, &mut host, 0, 0, &[]));
    assert_eq!(order(&deliver_all(&mut core, &mut host)), vec![(0, 0)]);
    assert!(feed(
        &mut core,
        &mut host,
        1,
        7,
        &[(ch(1, 0), 3), (ch(5, 2), 9)]
    ));
    assert!(feed(&mut core, &mut host, 1, 8, &[]));
    assert!(deliver_all(&mut core, &mut host).is_empty());
    host.commit(&mut core);

    let image =
        state_codec::load_image(host.store.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
            .unwrap();
    assert!(image.has_version);
    let restore = Restore {
        fed: image.fed.entries.clone(),
        frontier: image.frontier.entries.clone(),
        past: image.past.entries.clone(),
        held: image.held.entries.clone(),
    };
    let mut again = Core::new(
        Config {
            budget: BUDGET,
            ..Config::default()
        },
        core.received().to_vec(),
    );
    again.restore(&mut host, restore).unwrap();
    for c in core.received() {
        assert_eq!(again.covered(c), core.covered(c));
        assert_eq!(again.settled(c), core.settled(c));
    }
    assert_eq!(again.held_positions(1), core.held_positions(1));
    assert_eq!(again.frontier_bytes(), core.frontier_bytes());
    assert_eq!(
        again.frontier().collect::<Vec<_>>(),
        core.frontier().collect::<Vec<_>>()
    );
    let want = core.causes_header::<String>().unwrap().1.to_vec();
    assert_eq!(again.causes_header::<String>().unwrap().1, want.as_slice());
    let causes = again.head_causes(&mut host, 1).unwrap().unwrap();
    assert_eq!(&causes[..], &[(ch(1, 0), 3), (ch(5, 2), 9)]);
    // Nothing changed, so a commit writes nothing.
    assert!(host.commit(&mut again).is_empty());

    again
        .start::<String, _>(vec![Ok((Some(ch(1, 0)), 1)), Ok((Some(ch(7, 0)), 9))])
        .unwrap();
    for q in 1..4 {
        assert!(feed(&mut again, &mut host, 0, q, &[]));
    }
    let delivered = deliver_all(&mut again, &mut host);
    assert_eq!(
        order(&delivered),
        vec![(0, 1), (0, 2), (0, 3), (1, 7), (1, 8)]
    );
    assert_eq!(delivered[3].2, msg("1@7"));
    host.commit(&mut again);
    let image =
        state_codec::load_image(host.store.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
            .unwrap();
    assert!(image.held.is_empty());
    assert_eq!(image.past.get(&ch(5, 2)), Some(&9));
}

#[test]
fn a_frontier_near_the_budget_warns_once() {
    let mut host = TestHost::default();
    let mut core: Core<Msg> = Core::new(
        Config {
            budget: 50,
            ..Config::default()
        },
        vec![ch(1, 0)],
    );
    core.restore(&mut host, Restore::default()).unwrap();
    core.start::<String, _>(Vec::new()).unwrap();
    feed(&mut core, &mut host, 0, 0, &[(ch(2, 0), 1)]);
    assert!(host.warnings.is_empty());
    feed(&mut core, &mut host, 0, 1, &[(ch(2, 1), 1)]);
    feed(&mut core, &mut host, 0, 2, &[(ch(2, 2), 1)]);
    assert_eq!(host.warnings.len(), 1);
    assert!(host.warnings[0].starts_with("the causal frontier reached"));
}

/// A small deterministic generator for the patch tests (no dependency).
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn patched_headers_decode_and_merge_as_fresh_decodes() {
    // Per rank a relay-like stream: mostly one or two positions move (up or down, across
    // varint-free 8-byte fields), sometimes the header repeats, sometimes its channels
    // change (same length or not), sometimes a topic is pruned between feeds. Rank 1's
    // headers start with a cross-partition cause (warned, not refused, by default).
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut host = TestHost::default();
    let mut core = started(&mut host);
    let mut expected: BTreeMap<Channel, i64> = BTreeMap::new();
    let mut causes: [Vec<(Channel, i64)>; 2] = [
        (0..16).map(|j| (ch(2 + j / 8, i32::from(j % 8)), 1_000)).collect(),
        // a cause on partition 5 of the received topic 1, which another task reads
        vec![(ch(1, 5), 3), (ch(2, 0), 5), (ch(9, 300), 7)],
    ];
    let mut patched = 0;
    for q in 0..3_000i64 {
        let r = rng.below(2) as usize;
        let list = &mut causes[r];
        match rng.below(20) {
            0 => {
                // new channels, same count: same length unless a varint's width moves
                let k = rng.below(list.len() as u64) as usize;
                let partition = [0, 5, 127, 128, 300][rng.below(5) as usize];
                let topic = 10 + rng.below(3) as u8;
                list[k] = (ch(topic, partition), 10);
                list.sort();
                list.dedup_by(|a, b| a.0 == b.0);
            }
            1 => {
                let dead: FxSet<_> = [ch(10 + rng.below(3) as u8, 0).topic].into_iter().collect();
                if core.prune(&dead) {
                    expected.retain(|c, _| !dead.contains(&c.topic));
                }
            }
            2 => {} // the same header again
            _ => {
                for _ in 0..1 + rng.below(2) {
                    let k = rng.below(list.len() as u64) as usize;
                    let step = rng.below(1 << 20) as i64 - (1 << 18);
                    list[k].1 = (list[k].1 + step).max(0);
                }
            }
        }
        let header = encode_causes(list);
        let before = core.last_header[r].as_ref().map(|l| l.bytes.clone());
        core.feed(&mut host, r, q, q, CausesHeader::Value(&header), msg("x"))
            .unwrap();
        for &(c, p) in list.iter() {
            let e = expected.entry(c).or_insert(p);
            *e = (*e).max(p);
        }
        let last = core.last_header[r].as_ref().expect("a 16-entry header is kept");
        assert_eq!(last.bytes, header);
        assert_eq!(&last.decoded.causes[..], &decode_causes(&header).unwrap()[..]);
        let foreign: Vec<_> = list.iter().filter(|(c, _)| *c == ch(1, 5)).copied().collect();
        assert_eq!(&last.decoded.foreign[..], &foreign[..], "after feed {q}");
        if before.map_or(false, |b| b.len() == header.len() && b != header) {
            patched += 1;
        }
        let frontier: BTreeMap<Channel, i64> = core.frontier.iter().map(|(c, p)| (*c, p)).collect();
        assert_eq!(frontier, expected, "after feed {q}");
    }
    assert!(patched > 2_000, "only {patched} feeds took the patch path");
}

#[test]
fn a_patched_position_the_decoder_refuses_gets_the_decoders_diagnosis() {
    let mut host = TestHost::default();
    let mut core = started(&mut host);
    let mut fresh = started(&mut TestHost::default());
    let good = encode_causes(&[(ch(2, 0), 5), (ch(2, 1), 6)]);
    core.feed(&mut host, 0, 0, 0, CausesHeader::Value(&good), msg("x"))
        .unwrap();
    for bad_position in [-1i64, i64::MAX] {
        let mut bad = good.clone();
        let slot = bad.len() - 8; // the last entry's position
        bad[slot..].copy_from_slice(&bad_position.to_be_bytes());
        let diagnosis = |core: &mut Core<Msg>, host: &mut TestHost| {
            match core.feed(host, 0, 1, 1, CausesHeader::Value(&bad), msg("y")) {
                Err(Fault::Refused(r)) => format!("{r:?}"),
                other => panic!("not refused: {:?}", other.map_err(|_| ())),
            }
        };
        let patched = diagnosis(&mut core, &mut host);
        assert_eq!(patched, diagnosis(&mut fresh, &mut TestHost::default()));
        assert!(patched.contains("position"), "{patched}");
    }
}
