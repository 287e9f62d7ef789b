//! One task's ordering state: [`Core`], its setup and restore, `start`, pruning, the
//! queries, and the changelog rows it writes (docs/model.md, "Covered and settled",
//! "The stored form"). Receipt is in `receipt.rs`, decisions and delivery in
//! `delivery.rs`; the three are one `impl` split by job.
//!
//! Channels are referred to by rank, their index in the received channels in channel
//! order; the engine's dicts iterate in insertion order, as the Python engine's
//! (`parsley/engine/engine.py`), so the rows come out in the same order.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::rc::Rc;

use super::frontier::FrontierEncoding;
use super::fx::{FxMap, FxSet};
use super::host::{Fault, Host, Refusal};
use super::ordered::{OrderedMap, OrderedSet};
use crate::state_codec::{self, VERSION_KEY, VERSION_VALUE};
use crate::wire::{Channel, TopicId};

/// "Settled unknown": below every legal position, so it blocks.
pub(super) const NOTHING_SETTLED: i64 = -1;

/// A cause list: (channel, position) in the header's order.
pub type Causes = Rc<[(Channel, i64)]>;

/// Sabotage modes (`parsley.engine.sabotage.Sabotage`), for the meta-tests only.
pub const SABOTAGE_EAGER_DELIVERY: u8 = 1;
pub const SABOTAGE_IGNORE_ONE_CAUSE: u8 = 2;
pub const SABOTAGE_IGNORE_CROSS_PARTITION: u8 = 4;

/// How the process configured the engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Config {
    /// The metadata budget, bytes.
    pub budget: usize,
    /// A cause on a partition another task reads refuses (else: warned, unenforced).
    pub cross_refuse: bool,
    /// Sabotage mode, 0 for none.
    pub sabotage: u8,
    /// The store lacks its version entry, so the next rows stamp it.
    pub stamp_version: bool,
}

/// A restored image's entries (in the image's order); held: received channel ->
/// ascending positions.
#[derive(Clone, Debug, Default)]
pub struct Restore {
    pub fed: Vec<(Channel, i64)>,
    pub frontier: Vec<(Channel, i64)>,
    pub past: Vec<(Channel, i64)>,
    pub held: Vec<(Channel, Vec<i64>)>,
}

/// What receives the changelog rows: key, value (`None` deletes the key).
pub type RowSink<'a, E> = dyn FnMut(&[u8], Option<&[u8]>) -> Result<(), E> + 'a;

/// A delivered message: rank, position, body.
pub type Delivered<P> = (usize, i64, Held<P>);

/// A held message in memory: timestamp ms, the host's payload, causes.
pub struct Held<P> {
    pub ts: i64,
    pub payload: P,
    pub causes: Causes,
}

/// A decoded header value, the prune epoch at which it was last merged, and its causes on
/// channels of a received topic this task does not receive.
pub(super) struct Decoded {
    pub causes: Causes,
    pub foreign: Causes,
    pub merged_epoch: Cell<i64>,
}

/// The last causes header decoded on one rank: its bytes, its decoding, and where each
/// entry's position sits in the bytes (`crate::wire::position_slots`).
pub(super) struct LastHeader {
    pub bytes: Vec<u8>,
    pub decoded: Rc<Decoded>,
    pub slots: Vec<u32>,
}

/// One task's ordering state and delivery decisions; see the module docs.
pub struct Core<P> {
    pub(super) config: Config,

    pub(super) by_rank: Vec<Channel>,
    pub(super) rank: FxMap<Channel, usize>,
    pub(super) received_topics: FxSet<TopicId>,

    pub(super) fed: FxMap<Channel, i64>,
    pub(super) frontier: OrderedMap,
    pub(super) encoding: FrontierEncoding,
    /// Bumped whenever the header's bytes may have changed (the host caches its copy).
    pub(super) header_generation: u64,
    pub(super) past: OrderedMap,

    pub(super) queues: Vec<VecDeque<i64>>,
    pub(super) held_total: usize,
    pub(super) bodies: FxMap<(usize, i64), Held<P>>,
    pub(super) body_order: Vec<(usize, i64)>,
    pub(super) head_causes: Vec<Option<Causes>>,
    /// The one held body decoded from the store and kept (rank, position, body).
    pub(super) loaded: Option<(usize, i64, Held<P>)>,

    pub(super) settled: Vec<i64>,
    pub(super) candidates: Vec<usize>,
    pub(super) is_candidate: Vec<bool>,
    pub(super) waiting: Vec<BinaryHeap<Reverse<(i64, usize)>>>,
    pub(super) ready: BinaryHeap<Reverse<usize>>,

    /// Coverage when `start` ran: the session floor.
    pub(super) floor: Option<FxMap<Channel, i64>>,
    /// Per rank, the last position this execution fed.
    pub(super) fed_exec: Vec<Option<i64>>,

    pub(super) dirty_f: OrderedSet,
    pub(super) dirty_c: OrderedSet,
    pub(super) dirty_p: OrderedSet,
    pub(super) dirty_h: Vec<(usize, i64)>,

    pub(super) decoded: FxMap<Box<[u8]>, Rc<Decoded>>,
    /// Per rank, the last header decoded on it: a relay's next header differs from it only
    /// in positions, and is patched rather than decoded (`Core::header_decoding`).
    pub(super) last_header: Vec<Option<LastHeader>>,
    /// The entries the last patch changed when only they need merging (the header it
    /// patched was merged in this epoch); empty when the whole header needs merging.
    pub(super) changed: Vec<usize>,
    pub(super) epoch: i64,
    pub(super) last_past: Option<Causes>,
    pub(super) warned: bool,
    pub(super) cross_warned: FxSet<(usize, Channel)>,
    pub(super) cross_count: u64,
    /// Heads found waiting for a cause (`waited_count`), and per rank the last head
    /// counted, so a head decided again is not counted twice.
    pub(super) waited: u64,
    pub(super) waited_at: Vec<i64>,
    pub(super) no_causes: Causes,
}

impl<P> Core<P> {
    /// An empty engine receiving `received` (in channel order; rank = index).
    pub fn new(config: Config, received: Vec<Channel>) -> Self {
        let n = received.len();
        let mut rank = FxMap::default();
        let mut received_topics = FxSet::default();
        for (r, ch) in received.iter().enumerate() {
            rank.insert(*ch, r);
            received_topics.insert(ch.topic);
        }
        Core {
            config,
            by_rank: received,
            rank,
            received_topics,
            fed: FxMap::default(),
            frontier: OrderedMap::default(),
            encoding: FrontierEncoding::default(),
            header_generation: 0,
            past: OrderedMap::default(),
            queues: (0..n).map(|_| VecDeque::new()).collect(),
            held_total: 0,
            bodies: FxMap::default(),
            body_order: Vec::new(),
            head_causes: vec![None; n],
            loaded: None,
            settled: vec![NOTHING_SETTLED; n],
            candidates: Vec::new(),
            is_candidate: vec![false; n],
            waiting: (0..n).map(|_| BinaryHeap::new()).collect(),
            ready: BinaryHeap::new(),
            floor: None,
            fed_exec: vec![None; n],
            dirty_f: OrderedSet::default(),
            dirty_c: OrderedSet::default(),
            dirty_p: OrderedSet::default(),
            dirty_h: Vec::new(),
            decoded: FxMap::default(),
            last_header: (0..n).map(|_| None).collect(),
            changed: Vec::new(),
            epoch: 0,
            last_past: None,
            warned: false,
            cross_warned: FxSet::default(),
            cross_count: 0,
            waited: 0,
            waited_at: vec![-1; n],
            no_causes: Rc::from(Vec::new()),
        }
    }

    /// Load a restored image (once, before `start`): each channel's settled position is
    /// its held head - 1, else its coverage; every held channel's head is decided again.
    /// Warns if the restored frontier is near the budget.
    pub fn restore<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
        image: Restore,
    ) -> Result<(), Fault<H::Error>> {
        for (ch, p) in image.fed {
            self.fed.insert(ch, p);
        }
        for (ch, p) in image.frontier {
            self.frontier.set(ch, p);
            self.encoding.added(&ch);
        }
        for (ch, p) in image.past {
            self.past.set(ch, p);
        }
        for (ch, positions) in image.held {
            // Only received channels hold (the Python side refuses the others first).
            if let Some(&r) = self.rank.get(&ch) {
                self.held_total += positions.len();
                self.queues[r].extend(positions);
            }
        }
        for r in 0..self.by_rank.len() {
            self.settled[r] = match self.queues[r].front() {
                Some(&head) => head - 1,
                None => self
                    .fed
                    .get(&self.by_rank[r])
                    .copied()
                    .unwrap_or(NOTHING_SETTLED),
            };
        }
        for r in 0..self.by_rank.len() {
            if !self.queues[r].is_empty() {
                self.add_candidate(r);
            }
        }
        self.check_warning(host)
    }

    /// `start(start_positions)` (`ProcessEngine.start`): coverage rises to each received
    /// channel's delivered past, then to each start position - 1 (`starts` yields the
    /// channel, `None` for something else, and the position, >= 0; channels not received
    /// are ignored); the coverage then is the session floor. An `Err` from `starts` stops
    /// and is returned.
    pub fn start<E, I>(&mut self, starts: I) -> Result<(), Fault<E>>
    where
        I: IntoIterator<Item = Result<(Option<Channel>, i64), E>>,
    {
        if self.floor.is_some() {
            return Err(Fault::Misuse("start() was already called for this engine"));
        }
        for r in 0..self.by_rank.len() {
            let ch = self.by_rank[r];
            if let Some(past) = self.past.get(&ch) {
                self.advance_fed(ch, past);
            }
        }
        for item in starts {
            let (ch, start) = item.map_err(Fault::Host)?;
            if start > 0 {
                if let Some(r) = ch.and_then(|c| self.rank.get(&c).copied()) {
                    self.advance_fed(self.by_rank[r], start - 1);
                }
            }
        }
        self.floor = Some(self.fed.clone());
        Ok(())
    }

    /// `receive() before start()` is a misuse.
    pub fn require_started<E>(&self) -> Result<(), Fault<E>> {
        match self.floor {
            Some(_) => Ok(()),
            None => Err(Fault::Misuse(
                "receive() before start(): the session floor is not set",
            )),
        }
    }

    /// Raise coverage of `ch` to `position` (never lowers it); an empty received channel
    /// settles there.
    pub fn advance_fed(&mut self, ch: Channel, position: i64) {
        let current = self.fed.get(&ch).copied();
        if current.is_none() || position > current.unwrap() {
            self.fed.insert(ch, position);
            self.dirty_f.add(ch);
            if let Some(&r) = self.rank.get(&ch) {
                if self.queues[r].is_empty() {
                    self.raise_settled(r, position);
                }
            }
        }
    }

    /// Prune frontier and delivered-past entries on the `dead` topics; whether anything
    /// was pruned. Decoded headers merge again afterwards (a new epoch).
    pub fn prune(&mut self, dead: &FxSet<TopicId>) -> bool {
        let gone_c = self.frontier.remove_where(|c| dead.contains(&c.topic));
        for c in &gone_c {
            self.encoding.removed(c);
            self.dirty_c.add(*c);
        }
        if !gone_c.is_empty() {
            self.header_generation += 1;
        }
        let gone_p = self.past.remove_where(|c| dead.contains(&c.topic));
        for c in &gone_p {
            self.dirty_p.add(*c);
        }
        let pruned = !gone_c.is_empty() || !gone_p.is_empty();
        if pruned {
            self.epoch += 1;
            self.last_past = None;
        }
        pruned
    }

    /// The changelog rows but the name rows, in the Python engine's order: `v` (when
    /// stamping), `h` puts of bodies not yet written, `h` tombstones of delivered ones,
    /// `f`, `c`, `p` (`None` for a removed entry). Clears the marks; a written body
    /// leaves memory (it is read back from the store when needed).
    pub fn take_rows<H: Host<Payload = P>>(
        &mut self,
        host: &mut H,
        sink: &mut RowSink<'_, H::Error>,
    ) -> Result<(), Fault<H::Error>> {
        if self.config.stamp_version {
            sink(VERSION_KEY, Some(VERSION_VALUE)).map_err(Fault::Host)?;
        }
        // Drained, not replaced: the maps keep their capacity from commit to commit.
        let order: Vec<(usize, i64)> = self.body_order.drain(..).collect();
        for (r, q) in order {
            let body = match self.bodies.remove(&(r, q)) {
                Some(body) => body,
                None => continue,
            };
            let mut blob = Vec::new();
            host.lend_parts(&body.payload, &mut |parts| {
                blob = state_codec::encode_held_parts(
                    body.ts,
                    parts.key,
                    parts.value,
                    parts.headers,
                    &body.causes,
                );
            })
            .map_err(Fault::Host)?;
            let key = state_codec::held_key(&self.by_rank[r], q);
            sink(&key, Some(&blob)).map_err(Fault::Host)?;
        }
        for (r, q) in std::mem::take(&mut self.dirty_h) {
            sink(&state_codec::held_key(&self.by_rank[r], q), None).map_err(Fault::Host)?;
        }
        for ch in self.dirty_f.items() {
            let v = self.fed.get(ch).map(|v| v.to_be_bytes());
            sink(&state_codec::fed_key(ch), v.as_ref().map(|v| &v[..])).map_err(Fault::Host)?;
        }
        for ch in self.dirty_c.items() {
            let v = self.frontier.get(ch).map(i64::to_be_bytes);
            sink(&state_codec::frontier_key(ch), v.as_ref().map(|v| &v[..]))
                .map_err(Fault::Host)?;
        }
        for ch in self.dirty_p.items() {
            let v = self.past.get(ch).map(i64::to_be_bytes);
            sink(&state_codec::past_key(ch), v.as_ref().map(|v| &v[..])).map_err(Fault::Host)?;
        }
        self.config.stamp_version = false;
        self.dirty_f.clear();
        self.dirty_c.clear();
        self.dirty_p.clear();
        self.encoding.trim(self.frontier.len());
        Ok(())
    }

    // ------------------------------------------------------------------ queries

    /// The received channels in channel order (index = rank).
    pub fn received(&self) -> &[Channel] {
        &self.by_rank
    }

    /// The rank of a received channel.
    pub fn rank_of(&self, ch: &Channel) -> Option<usize> {
        self.rank.get(ch).copied()
    }

    /// Whether `start` has run.
    pub fn started(&self) -> bool {
        self.floor.is_some()
    }

    /// `fedUpTo(ch)`, `FED_TO_END` for a deleted channel.
    pub fn covered(&self, ch: &Channel) -> Option<i64> {
        self.fed.get(ch).copied()
    }

    /// `settled(ch)`: head - 1 if anything is held, else covered.
    pub fn settled(&self, ch: &Channel) -> Option<i64> {
        if let Some(&r) = self.rank.get(ch) {
            if let Some(&head) = self.queues[r].front() {
                return Some(head - 1);
            }
        }
        self.fed.get(ch).copied()
    }

    /// Coverage of `ch` when `start` ran.
    pub fn session_floor(&self, ch: &Channel) -> Option<i64> {
        self.floor.as_ref()?.get(ch).copied()
    }

    /// Messages held on every channel.
    pub fn held_total(&self) -> usize {
        self.held_total
    }

    /// Positions held on rank `r`, ascending (FIFO).
    pub fn held_positions(&self, r: usize) -> &VecDeque<i64> {
        &self.queues[r]
    }

    /// The frontier's encoded size in bytes (docs/wire-format.md, "Size").
    pub fn frontier_bytes(&self) -> usize {
        self.encoding.size()
    }

    /// The frontier, insertion order.
    pub fn frontier(&self) -> impl Iterator<Item = (&Channel, i64)> + '_ {
        self.frontier.iter()
    }

    /// The delivered past, insertion order.
    pub fn past(&self) -> impl Iterator<Item = (&Channel, i64)> + '_ {
        self.past.iter()
    }

    /// Topic ids of the frontier and the delivered past.
    pub fn state_topics(&self) -> FxSet<TopicId> {
        let mut ids: FxSet<TopicId> = FxSet::default();
        ids.extend(self.frontier.iter().map(|(c, _)| c.topic));
        ids.extend(self.past.iter().map(|(c, _)| c.topic));
        ids
    }

    /// The metadata budget, bytes.
    pub fn budget(&self) -> usize {
        self.config.budget
    }

    /// Set the metadata budget (tests lower it under a restored frontier).
    pub fn set_budget(&mut self, budget: usize) {
        self.config.budget = budget;
    }

    /// Held bodies in memory not yet written as rows, in feed order.
    pub fn unpersisted(&self) -> impl Iterator<Item = (usize, i64)> + '_ {
        self.body_order
            .iter()
            .copied()
            .filter(move |k| self.bodies.contains_key(k))
    }

    /// The causes of rank `r`'s head, when known in memory.
    pub fn known_head_causes(&self, r: usize) -> Option<&Causes> {
        self.head_causes[r].as_ref()
    }

    /// The one body decoded from the store and kept: (rank, position).
    pub fn loaded_at(&self) -> Option<(usize, i64)> {
        self.loaded.as_ref().map(|(r, q, _)| (*r, *q))
    }

    /// Messages accepted with a cause the task could not enforce.
    pub fn cross_partition_causes(&self) -> u64 {
        self.cross_count
    }

    /// Heads found waiting for a cause not yet delivered, each counted once.
    pub fn waited_count(&self) -> u64 {
        self.waited
    }

    // ------------------------------------------------------------------ shared steps

    pub(super) fn refused<E>(refusal: Refusal) -> Fault<E> {
        Fault::Refused(refusal)
    }

    #[inline]
    pub(super) fn add_candidate(&mut self, r: usize) {
        if !self.is_candidate[r] {
            self.is_candidate[r] = true;
            self.candidates.push(r);
        }
    }

    /// Raise rank `r`'s settled position; heads waiting on it up to there decide again.
    pub(super) fn raise_settled(&mut self, r: usize, settled: i64) {
        if settled > self.settled[r] {
            self.settled[r] = settled;
            while let Some(Reverse((p, waiter))) = self.waiting[r].peek().copied() {
                if p > settled {
                    break;
                }
                self.waiting[r].pop();
                self.add_candidate(waiter);
            }
        }
    }
}
