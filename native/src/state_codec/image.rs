//! The ordering image: one task's decoded, validated state, read from the changelog's
//! entries in key order (`ImageLoader`, `load_image`).

use std::collections::HashMap;

use super::*;

/// A map that keeps first-insertion order (as a Python dict does).
#[derive(Clone, Debug)]
pub struct OrderedMap<K, V> {
    pub entries: Vec<(K, V)>,
    index: HashMap<K, usize>,
}

impl<K, V> Default for OrderedMap<K, V> {
    fn default() -> Self {
        OrderedMap {
            entries: Vec::new(),
            index: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + std::hash::Hash, V> OrderedMap<K, V> {
    /// Set `key` to `value`; a key already present keeps its place.
    pub fn insert(&mut self, key: K, value: V) {
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
            }
        }
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match self.index.get(key) {
            Some(&i) => Some(&mut self.entries[i].1),
            None => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// One task's decoded, validated ordering state (held bodies not kept); maps iterate in
/// the order the keys arrived.
#[derive(Clone, Debug, Default)]
pub struct OrderingImage {
    pub has_version: bool,
    pub fed: OrderedMap<Channel, i64>,
    pub frontier: OrderedMap<Channel, i64>,
    pub past: OrderedMap<Channel, i64>,
    pub names: OrderedMap<String, TopicId>,
    pub held: OrderedMap<Channel, Vec<i64>>,
}

impl OrderingImage {
    /// True when no state entry (besides the version) was present.
    pub fn is_empty(&self) -> bool {
        self.fed.is_empty()
            && self.frontier.is_empty()
            && self.past.is_empty()
            && self.names.is_empty()
            && self.held.is_empty()
    }
}

/// Streaming reader of one task's ordering state: [`ImageLoader::push`] every (key, value)
/// in ascending key order, then [`ImageLoader::finish`]. Each held blob is validated as it
/// arrives and only its position kept.
///
/// The version decides whether anything else can be read, so it is judged first whatever
/// order the keys arrive in: after the first refused entry, the rest are scanned for the
/// version entry only, and that refusal is returned by `finish` after the version verdict
/// (the reference `load_image`; Java's `ProcessEngine` constructor).
#[derive(Default)]
pub struct ImageLoader {
    image: OrderingImage,
    version: Option<Vec<u8>>,
    state_seen: bool,
    failed: Option<String>,
    channels: HashMap<[u8; CHANNEL_BYTES], Channel>,
}

impl ImageLoader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed one live entry.
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        if self.failed.is_some() {
            if key == VERSION_KEY {
                self.version = Some(value.to_vec());
            } else if key.first().map_or(false, |&t| is_state_tag(t)) {
                self.state_seen = true;
            }
            return;
        }
        match self.one_entry(key, value) {
            Ok(()) => {
                if key == VERSION_KEY {
                    self.version = Some(value.to_vec());
                }
            }
            Err(diagnosis) => {
                self.failed = Some(diagnosis);
                self.state_seen = key.first().map_or(false, |&t| is_state_tag(t));
            }
        }
    }

    /// The image, or the refusal the reference `load_image` raises.
    pub fn finish(self) -> Result<OrderingImage, String> {
        let mut image = self.image;
        match self.version {
            Some(v) => {
                if v != VERSION_VALUE {
                    return Err(UNKNOWN_VERSION.to_string());
                }
                image.has_version = true;
            }
            None => {
                if self.state_seen || !image.is_empty() {
                    return Err(LOST_HEAD.to_string());
                }
            }
        }
        if let Some(failed) = self.failed {
            return Err(failed);
        }
        for (ch, positions) in &image.held.entries {
            check_held_within_coverage(ch, positions, image.fed.get(ch).copied())?;
        }
        Ok(image)
    }

    fn channel(&mut self, key: &[u8]) -> Result<Channel, String> {
        let raw: [u8; CHANNEL_BYTES] = key[1..CHANNEL_KEY_BYTES].try_into().expect("20 bytes");
        if let Some(ch) = self.channels.get(&raw) {
            return Ok(*ch);
        }
        let ch = channel_at(key, 1, key)?;
        self.channels.insert(raw, ch);
        Ok(ch)
    }

    fn one_entry(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let tag = match key.first() {
            Some(&t) => t,
            None => return Err("corrupt ordering key: length 0".to_string()),
        };
        match tag {
            TAG_HELD => {
                if key.len() != HELD_KEY_BYTES {
                    return Err(format!("corrupt held key: length {}", key.len()));
                }
                let ch = self.channel(key)?;
                let position = read_i64(key, CHANNEL_KEY_BYTES);
                if !(0..FED_TO_END).contains(&position) {
                    return Err(format!(
                        "corrupt held key: position {position} on {ch}, which no channel can \
                         assign"
                    ));
                }
                match self.image.held.get_mut(&ch) {
                    None => self.image.held.insert(ch, vec![position]),
                    Some(positions) => {
                        let last = *positions.last().expect("non-empty");
                        if last >= position {
                            return Err(format!(
                                "held messages restored out of position order on {ch} ({last} \
                                 before {position}); the store's scan broke its ordering \
                                 contract"
                            ));
                        }
                        positions.push(position);
                    }
                }
                validate_held(value)
            }
            TAG_FED | TAG_FRONTIER | TAG_PAST => {
                if key.len() != CHANNEL_KEY_BYTES {
                    return Err(format!(
                        "corrupt ordering key: length {} for tag '{}'",
                        key.len(),
                        tag as char
                    ));
                }
                let ch = self.channel(key)?;
                if tag == TAG_FED {
                    let covered = decode_coverage(&ch, value)?;
                    self.image.fed.insert(ch, covered);
                    return Ok(());
                }
                let position = decode_long(value)?;
                if tag == TAG_FRONTIER {
                    if ch.topic == [0u8; 16] {
                        return Err(format!(
                            "restored frontier names the reserved zero topic id; {}",
                            forged(5)
                        ));
                    }
                    let p = assignable(&ch, position, "frontier")?;
                    self.image.frontier.insert(ch, p);
                } else {
                    let p = assignable(&ch, position, "delivered past")?;
                    self.image.past.insert(ch, p);
                }
                Ok(())
            }
            TAG_NAME => {
                let name = name_of_key(key)?;
                let topic = decode_binding(value, name)?;
                self.image.names.insert(name.to_string(), topic);
                Ok(())
            }
            TAG_VERSION => {
                if key.len() != 1 {
                    return Err(format!(
                        "corrupt ordering key: length {} for tag 'v'",
                        key.len()
                    ));
                }
                Ok(())
            }
            _ => Err(format!(
                "corrupt ordering key: unknown tag {}",
                TagText(key)
            )),
        }
    }
}

fn check_held_within_coverage(
    ch: &Channel,
    positions: &[i64],
    fed: Option<i64>,
) -> Result<(), String> {
    // A message is fed (coverage raised to its position) before it is held, and a channel
    // is fed to its end only with nothing held. A hold above coverage would restore ahead of
    // a lower position fed later and deliver out of order.
    let fed = match fed {
        Some(f) => f,
        None => {
            return Err(format!(
                "{OUT_OF_ORDER}held message at {ch}@{} on a channel with no coverage row; {}",
                positions[0],
                held_unfed()
            ))
        }
    };
    if fed == FED_TO_END {
        return Err(format!(
            "{OUT_OF_ORDER}held message at {ch}@{} on a channel recorded as no longer existing \
             (fedUpTo={fed}); a channel is fed to its end only with nothing held, so this row \
             is corrupt ordering state. {RESET}",
            positions[0]
        ));
    }
    if let Some(&above) = positions.iter().find(|&&p| p > fed) {
        return Err(format!(
            "{OUT_OF_ORDER}held message at {ch}@{above} above its channel's coverage \
             (fedUpTo={fed}); {}",
            held_unfed()
        ));
    }
    Ok(())
}

/// Parse and validate every entry of one task's ordering state (refusals as the reference
/// `load_image`; docs/model.md, "The stored form", "Checks when state is restored").
pub fn load_image<'a, I>(items: I) -> Result<OrderingImage, String>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    let mut loader = ImageLoader::new();
    for (k, v) in items {
        loader.push(k, v);
    }
    loader.finish()
}

/// The topic id text of a name binding, for callers formatting diagnoses.
pub fn topic_text(topic: &TopicId) -> String {
    UuidText(topic).to_string()
}
