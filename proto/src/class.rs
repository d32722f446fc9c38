//! Priority classes, device selectors and placement policies: the vocabulary shared by the daemon and its clients.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Priority class of a request. Higher classes are served first; FIFO within a class.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Batch work that may wait for everything else.
    Background,
    /// The default: regular proofs (C2).
    #[default]
    Normal,
    /// Time-bound work (WindowPoSt).
    High,
    /// Deadline-critical work (WinningPoSt): its waiting asks compute holders to yield.
    Critical,
}

impl Class {
    /// Every class, highest first.
    pub const ALL: [Class; 4] = [
        Class::Critical,
        Class::High,
        Class::Normal,
        Class::Background,
    ];

    /// The class's name as used on the wire, in config and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Critical => "critical",
            Class::High => "high",
            Class::Normal => "normal",
            Class::Background => "background",
        }
    }

    /// 0 for `critical` up to 3 for `background`: the order in which queues are served.
    pub fn rank(self) -> usize {
        match self {
            Class::Critical => 0,
            Class::High => 1,
            Class::Normal => 2,
            Class::Background => 3,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A class name that is not one of the four.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown class {0:?} (expected critical, high, normal or background)")]
pub struct ClassError(pub String);

impl FromStr for Class {
    type Err = ClassError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Class::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ClassError(s.to_string()))
    }
}

/// Which device a request wants: one named by index or UUID, or any (gpud chooses).
///
/// On the wire and on the command line it is a string: `"any"`, `"0"`, or `"GPU-…"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Placement {
    /// gpud chooses: the device that can grant soonest, then the best fit.
    #[default]
    Any,
    /// The device with this gpud index.
    Index(u32),
    /// The device with this UUID.
    Uuid(String),
}

/// A device selector that could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid device {0:?} (expected \"any\", an index such as 0, or a UUID such as GPU-…)")]
pub struct PlacementError(pub String);

impl FromStr for Placement {
    type Err = PlacementError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("any") {
            Ok(Placement::Any)
        } else if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            t.parse()
                .map(Placement::Index)
                .map_err(|_| PlacementError(s.to_string()))
        } else if t.len() >= 4
            && t.len() <= 96
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            Ok(Placement::Uuid(t.to_string()))
        } else {
            Err(PlacementError(s.to_string()))
        }
    }
}

impl TryFrom<String> for Placement {
    type Error = PlacementError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Placement> for String {
    fn from(p: Placement) -> String {
        p.to_string()
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Any => f.write_str("any"),
            Placement::Index(i) => write!(f, "{i}"),
            Placement::Uuid(u) => f.write_str(u),
        }
    }
}

/// How gpud chooses among the devices that can grant a request at once (docs/PROTOCOL.md,
/// "Placement policies"). On the wire and the command line: `best-fit`, `spread`, `pack`,
/// `near`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementPolicy {
    /// Least memory left over, then fewest compute holders, then lowest index (the default).
    #[default]
    BestFit,
    /// Most free memory, then fewest compute holders: load is spread over the devices.
    Spread,
    /// The most loaded device that fits first, so whole devices stay free.
    Pack,
    /// Every part on one NVLink island or NUMA node.
    Near,
}

impl PlacementPolicy {
    /// Every policy.
    pub const ALL: [PlacementPolicy; 4] = [
        PlacementPolicy::BestFit,
        PlacementPolicy::Spread,
        PlacementPolicy::Pack,
        PlacementPolicy::Near,
    ];

    /// Its name on the wire and the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementPolicy::BestFit => "best-fit",
            PlacementPolicy::Spread => "spread",
            PlacementPolicy::Pack => "pack",
            PlacementPolicy::Near => "near",
        }
    }
}

impl fmt::Display for PlacementPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A placement policy name that is not one of the four.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown placement policy {0:?} (expected best-fit, spread, pack or near)")]
pub struct PlacementPolicyError(pub String);

impl FromStr for PlacementPolicy {
    type Err = PlacementPolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PlacementPolicy::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| PlacementPolicyError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_order_and_parse() {
        assert!(Class::Critical > Class::High && Class::High > Class::Normal);
        assert!(Class::Normal > Class::Background);
        assert_eq!("CRITICAL".parse::<Class>(), Ok(Class::Critical));
        assert!("urgent".parse::<Class>().is_err());
        for c in Class::ALL {
            assert_eq!(c.as_str().parse::<Class>(), Ok(c));
        }
    }

    #[test]
    fn placement_policies_parse_and_print() {
        for p in PlacementPolicy::ALL {
            assert_eq!(p.as_str().parse::<PlacementPolicy>(), Ok(p));
            let wire = serde_json::to_string(&p).unwrap();
            assert_eq!(wire, format!("\"{}\"", p.as_str()));
        }
        assert!("first-fit".parse::<PlacementPolicy>().is_err());
        assert!(serde_json::from_str::<PlacementPolicy>("\"wide\"").is_err());
    }

    #[test]
    fn placements_parse_and_print() {
        assert_eq!("any".parse::<Placement>(), Ok(Placement::Any));
        assert_eq!("3".parse::<Placement>(), Ok(Placement::Index(3)));
        let uuid = "GPU-5f3e2c1a-0000-1111-2222-333344445555";
        assert_eq!(uuid.parse::<Placement>(), Ok(Placement::Uuid(uuid.into())));
        assert!("".parse::<Placement>().is_err());
        assert!("../etc".parse::<Placement>().is_err());
        assert!("99999999999".parse::<Placement>().is_err());
        assert_eq!(
            serde_json::to_string(&Placement::Index(1)).unwrap(),
            "\"1\""
        );
    }
}
