//! The boundary between the ledger's vocabulary and the wire's: the same words, converted
//! here so that neither side depends on the other.

use crate::ledger;

impl From<gpud_proto::Class> for ledger::Class {
    fn from(c: gpud_proto::Class) -> Self {
        match c {
            gpud_proto::Class::Background => Self::Background,
            gpud_proto::Class::Normal => Self::Normal,
            gpud_proto::Class::High => Self::High,
            gpud_proto::Class::Critical => Self::Critical,
        }
    }
}

impl From<ledger::Class> for gpud_proto::Class {
    fn from(c: ledger::Class) -> Self {
        match c {
            ledger::Class::Background => Self::Background,
            ledger::Class::Normal => Self::Normal,
            ledger::Class::High => Self::High,
            ledger::Class::Critical => Self::Critical,
        }
    }
}

impl From<gpud_proto::Placement> for ledger::Placement {
    fn from(p: gpud_proto::Placement) -> Self {
        match p {
            gpud_proto::Placement::Any => Self::Any,
            gpud_proto::Placement::Index(i) => Self::Index(i),
            gpud_proto::Placement::Uuid(u) => Self::Uuid(u),
        }
    }
}

impl From<ledger::Placement> for gpud_proto::Placement {
    fn from(p: ledger::Placement) -> Self {
        match p {
            ledger::Placement::Any => Self::Any,
            ledger::Placement::Index(i) => Self::Index(i),
            ledger::Placement::Uuid(u) => Self::Uuid(u),
        }
    }
}

impl From<gpud_proto::PlacementPolicy> for ledger::PlacementPolicy {
    fn from(p: gpud_proto::PlacementPolicy) -> Self {
        match p {
            gpud_proto::PlacementPolicy::BestFit => Self::BestFit,
            gpud_proto::PlacementPolicy::Spread => Self::Spread,
            gpud_proto::PlacementPolicy::Pack => Self::Pack,
            gpud_proto::PlacementPolicy::Near => Self::Near,
        }
    }
}

impl From<ledger::YieldReason> for gpud_proto::YieldReason {
    fn from(r: ledger::YieldReason) -> Self {
        match r {
            ledger::YieldReason::CriticalWaiting => Self::CriticalWaiting,
            ledger::YieldReason::MaxHold => Self::MaxHold,
        }
    }
}

impl From<ledger::RevokeReason> for gpud_proto::RevokeReason {
    fn from(r: ledger::RevokeReason) -> Self {
        match r {
            ledger::RevokeReason::Admin => Self::Admin,
            ledger::RevokeReason::YieldIgnored => Self::YieldIgnored,
            ledger::RevokeReason::OverUse => Self::OverUse,
            ledger::RevokeReason::BudgetEnded => Self::BudgetEnded,
            ledger::RevokeReason::Reclaimed => Self::Reclaimed,
            ledger::RevokeReason::HolderStopped => Self::HolderStopped,
        }
    }
}

impl From<ledger::QueueCounts> for gpud_proto::QueueCounts {
    fn from(q: ledger::QueueCounts) -> Self {
        Self {
            critical: q.critical,
            high: q.high,
            normal: q.normal,
            background: q.background,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_survives_the_round_trip() {
        for c in gpud_proto::Class::ALL {
            let back: gpud_proto::Class = ledger::Class::from(c).into();
            assert_eq!(back, c);
            assert_eq!(ledger::Class::from(c).rank(), c.rank());
        }
        for p in [
            gpud_proto::Placement::Any,
            gpud_proto::Placement::Index(3),
            gpud_proto::Placement::Uuid("GPU-x".into()),
        ] {
            let ours = ledger::Placement::from(p.clone());
            assert_eq!(ours.to_string(), p.to_string());
            assert_eq!(gpud_proto::Placement::from(ours), p);
        }
    }
}
