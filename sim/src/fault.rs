//! Fault descriptions: power cuts, tear modes and injected errors.
//!
//! A [`PowerCut`] is fully described by a seed, the point where power fails and
//! the way the operation in flight is torn. Its [`Display`](fmt::Display) form
//! is a *replay string* such as `seed=7;cut=op:12;tear=bits` that
//! [`FromStr`] parses back, so any failure found by a campaign can be replayed
//! exactly.

use core::fmt;
use core::str::FromStr;

use serde::Serialize;

/// The kind of a flash call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum OpKind {
    /// `read`
    Read,
    /// `write` (program)
    Program,
    /// `erase`
    Erase,
}

impl OpKind {
    pub(crate) fn index(self) -> usize {
        match self {
            OpKind::Read => 0,
            OpKind::Program => 1,
            OpKind::Erase => 2,
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Read => "read",
            OpKind::Program => "program",
            OpKind::Erase => "erase",
        })
    }
}

/// Where power fails, counted from the moment the cut is armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CutPoint {
    /// Power fails during the program-or-erase call with this 0-based index;
    /// the call is torn according to the [`Tear`] mode.
    Op(u64),
    /// Power fails once this many more bytes have been programmed: the program
    /// call that crosses the budget lands only the bytes within it.
    Byte(u64),
}

/// What the operation in flight leaves behind when power fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Tear {
    /// The first `k` bytes of the call land, the rest is untouched. For an
    /// erase, the first `k` bytes of the range read back as 0xFF.
    /// `Prefix(0)` is a cut just before the call; a `k` at or past its length,
    /// a cut just after it.
    Prefix(usize),
    /// A random subset of the intended 1-to-0 bits lands in the words in
    /// flight. For an erase, a random subset of the 0 bits of the sector in
    /// flight returns to 1.
    Bits,
    /// The words in flight take random values (erase: a random subset of the
    /// bits of the sector in flight returns to 1).
    Random,
}

/// A power cut armed on a flash, with the seed of its randomness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PowerCut {
    /// Seed of every random choice the cut makes.
    pub seed: u64,
    /// When power fails.
    pub at: CutPoint,
    /// How the call in flight is torn ([`CutPoint::Byte`] always tears as a
    /// prefix).
    pub tear: Tear,
}

impl fmt::Display for Tear {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tear::Prefix(k) => write!(f, "prefix:{k}"),
            Tear::Bits => f.write_str("bits"),
            Tear::Random => f.write_str("random"),
        }
    }
}

impl fmt::Display for CutPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CutPoint::Op(n) => write!(f, "op:{n}"),
            CutPoint::Byte(n) => write!(f, "byte:{n}"),
        }
    }
}

impl fmt::Display for PowerCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed={};cut={};tear={}", self.seed, self.at, self.tear)
    }
}

/// A replay string that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseFaultError(pub String);

impl fmt::Display for ParseFaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad fault replay string: {}", self.0)
    }
}

impl std::error::Error for ParseFaultError {}

fn parse_u64(what: &str, s: &str) -> Result<u64, ParseFaultError> {
    s.parse()
        .map_err(|_| ParseFaultError(format!("{what} {s:?} is not an unsigned integer")))
}

impl FromStr for Tear {
    type Err = ParseFaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bits" => Ok(Tear::Bits),
            "random" => Ok(Tear::Random),
            _ => match s.strip_prefix("prefix:") {
                Some(k) => Ok(Tear::Prefix(parse_u64("prefix length", k)? as usize)),
                None => Err(ParseFaultError(format!(
                    "tear {s:?} is not prefix:<k>, bits or random"
                ))),
            },
        }
    }
}

impl FromStr for CutPoint {
    type Err = ParseFaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(n) = s.strip_prefix("op:") {
            Ok(CutPoint::Op(parse_u64("op index", n)?))
        } else if let Some(n) = s.strip_prefix("byte:") {
            Ok(CutPoint::Byte(parse_u64("byte count", n)?))
        } else {
            Err(ParseFaultError(format!(
                "cut {s:?} is not op:<n> or byte:<n>"
            )))
        }
    }
}

impl FromStr for PowerCut {
    type Err = ParseFaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (mut seed, mut at, mut tear) = (None, None, None);
        for field in s.trim().split(';').filter(|f| !f.is_empty()) {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| ParseFaultError(format!("field {field:?} has no '='")))?;
            match key.trim() {
                "seed" => seed = Some(parse_u64("seed", value.trim())?),
                "cut" => at = Some(value.trim().parse()?),
                "tear" => tear = Some(value.trim().parse()?),
                other => {
                    return Err(ParseFaultError(format!(
                        "unknown field {other:?} (expected seed, cut, tear)"
                    )))
                }
            }
        }
        let at = at.ok_or_else(|| ParseFaultError("missing cut=".into()))?;
        Ok(PowerCut {
            seed: seed.unwrap_or(0),
            at,
            tear: tear.unwrap_or(Tear::Prefix(0)),
        })
    }
}

/// An error injected at a given call of one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct InjectedError {
    /// The kind of call that fails.
    pub op: OpKind,
    /// 0-based index of the first failing call of that kind, counted from the
    /// moment the error is injected.
    pub at_call: u64,
    /// Whether every later call of that kind fails too, until the faults are
    /// cleared.
    pub persistent: bool,
}

impl fmt::Display for InjectedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-error at call {}{}",
            self.op,
            self.at_call,
            if self.persistent { " (persistent)" } else { "" }
        )
    }
}
