//! NVLink islands from the links each device reports: devices joined by NVLink, directly or
//! through NVSwitches, form one island.
//!
//! Pure, so that it is tested without hardware; the NVML backend feeds it each device's own
//! PCI bus id and the bus ids at the far end of its active links.

use std::collections::BTreeMap;

/// Each device's island (the lowest index among the devices it is joined to), or `None` for a
/// device without an active link to another device. `own[i]` is device `i`'s PCI bus id and
/// `remote[i]` the bus ids its active links lead to (other GPUs, or NVSwitches that several
/// GPUs share). Bus ids are compared without case.
pub fn nvlink_islands(own: &[String], remote: &[Vec<String>]) -> Vec<Option<u32>> {
    // Union-find over every bus id seen: GPUs and the switches between them.
    let mut ids: BTreeMap<String, usize> = BTreeMap::new();
    let mut parent: Vec<usize> = Vec::new();
    let mut node = |bus: &str, parent: &mut Vec<usize>| {
        *ids.entry(bus.to_ascii_lowercase()).or_insert_with(|| {
            parent.push(parent.len());
            parent.len() - 1
        })
    };
    let gpus: Vec<usize> = own.iter().map(|b| node(b, &mut parent)).collect();
    let mut linked = vec![false; own.len()];
    for (i, far) in remote.iter().enumerate().take(own.len()) {
        for bus in far {
            let other = node(bus, &mut parent);
            union(&mut parent, gpus[i], other);
            linked[i] = true;
        }
    }
    let mut lowest: BTreeMap<usize, u32> = BTreeMap::new();
    let mut members: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, &g) in gpus.iter().enumerate() {
        let root = find(&mut parent, g);
        lowest.entry(root).or_insert(i as u32);
        *members.entry(root).or_default() += 1;
    }
    gpus.iter()
        .enumerate()
        .map(|(i, &g)| {
            let root = find(&mut parent, g);
            // A device linked only to a switch no other device reaches is alone.
            (linked[i] && members[&root] > 1).then(|| lowest[&root])
        })
        .collect()
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        parent[ra.max(rb)] = ra.min(rb);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn pairs_joined_directly_are_two_islands() {
        let own = ids(&[
            "0000:01:00.0",
            "0000:02:00.0",
            "0000:81:00.0",
            "0000:82:00.0",
        ]);
        let remote = vec![
            ids(&["0000:02:00.0", "0000:02:00.0"]),
            ids(&["0000:01:00.0"]),
            ids(&["0000:82:00.0"]),
            ids(&["0000:81:00.0"]),
        ];
        assert_eq!(
            nvlink_islands(&own, &remote),
            vec![Some(0), Some(0), Some(2), Some(2)]
        );
    }

    #[test]
    fn devices_behind_shared_switches_are_one_island_and_unlinked_ones_none() {
        let own = ids(&["0000:0A:00.0", "0000:0b:00.0", "0000:0c:00.0"]);
        let remote = vec![
            ids(&["0000:f0:00.0", "0000:F1:00.0"]),
            ids(&["0000:f1:00.0"]),
            vec![],
        ];
        assert_eq!(nvlink_islands(&own, &remote), vec![Some(0), Some(0), None]);
        // A link to a switch that no other device reaches joins nothing.
        let remote = vec![ids(&["0000:f0:00.0"]), vec![], vec![]];
        assert_eq!(nvlink_islands(&own, &remote), vec![None, None, None]);
    }
}
