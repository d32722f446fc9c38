//! Access lists as the config names them, resolved against this host's group database for
//! the core's [`Access`] checks.

use std::collections::HashSet;

use super::core::Access;
use crate::config::{AccessConfig, GroupRef};

/// Resolves group names; names that do not exist are returned so they can be logged.
pub fn resolve(config: &AccessConfig) -> (Access, Vec<String>) {
    let mut missing = Vec::new();
    let mut gids = |groups: &[GroupRef]| -> HashSet<u32> {
        groups
            .iter()
            .filter_map(|g| match g {
                GroupRef::Id(id) => Some(*id),
                GroupRef::Name(name) => match nix::unistd::Group::from_name(name) {
                    Ok(Some(g)) => Some(g.gid.as_raw()),
                    _ => {
                        missing.push(name.clone());
                        None
                    }
                },
            })
            .collect()
    };
    let allowed_gids = gids(&config.allowed_groups);
    let admin_gids = gids(&config.admin_groups);
    let critical_gids = gids(&config.critical_groups);
    // The daemon's own user may always use it: it owns the socket anyway.
    let me = nix::unistd::geteuid().as_raw();
    let mut allowed_uids: HashSet<u32> = config.allowed_uids.iter().copied().collect();
    allowed_uids.extend([0, me]);
    let mut admin_uids: HashSet<u32> = config.admin_uids.iter().copied().collect();
    admin_uids.extend([0, me]);
    let mut critical_uids: HashSet<u32> = config.critical_uids.iter().copied().collect();
    critical_uids.extend([0, me]);
    (
        Access {
            allowed_uids,
            allowed_gids,
            admin_uids,
            admin_gids,
            critical_uids,
            critical_gids,
        },
        missing,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::core::Peer;

    fn peer(uid: u32, gid: u32, groups: Vec<u32>) -> Peer {
        Peer {
            pid: 1,
            uid,
            gid,
            groups,
            process: "x".into(),
            start: 0,
            cgroups: Vec::new(),
        }
    }

    #[test]
    fn uids_and_groups_are_checked() {
        let config = AccessConfig {
            allowed_uids: vec![4242],
            allowed_groups: vec![
                GroupRef::Id(500),
                GroupRef::Name("no-such-group-gpud".into()),
            ],
            admin_uids: vec![],
            admin_groups: vec![GroupRef::Id(600)],
            critical_uids: vec![4242],
            critical_groups: vec![GroupRef::Id(700)],
        };
        let (access, missing) = resolve(&config);
        assert_eq!(missing, vec!["no-such-group-gpud".to_string()]);
        assert!(access.may_use(&peer(4242, 4242, vec![]), gpud_proto::Class::Critical));
        assert!(access.may_use(&peer(2000, 2000, vec![700]), gpud_proto::Class::Critical));
        assert!(
            access.may_use(&peer(0, 0, vec![]), gpud_proto::Class::Critical),
            "root"
        );
        assert!(!access.may_use(&peer(2000, 500, vec![]), gpud_proto::Class::Critical));
        assert!(access.may_use(&peer(2000, 500, vec![]), gpud_proto::Class::High));
        assert!(access.may_connect(&peer(4242, 4242, vec![])));
        assert!(access.may_connect(&peer(2000, 500, vec![])));
        assert!(access.may_connect(&peer(2000, 2000, vec![7, 500])));
        assert!(
            access.may_connect(&peer(2000, 2000, vec![600])),
            "admins may connect"
        );
        assert!(!access.may_connect(&peer(2000, 2000, vec![7])));
        assert!(access.is_admin(&peer(0, 0, vec![])));
        assert!(access.is_admin(&peer(3000, 3000, vec![600])));
        assert!(!access.is_admin(&peer(4242, 4242, vec![])));
    }
}
