//! Resident memory of a process tree, read from `/proc` (Linux).
//!
//! Reads are plain `std::fs` calls on procfs: they are served from kernel memory in a few
//! microseconds and never wait on a disk, so the watcher makes them inline rather than through
//! `tokio::fs` (which would cost a blocking-pool round trip per read). Every read tolerates the
//! process having exited in between: a vanished process simply counts for nothing.

/// One look at the memory of a function's process tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct MemoryReading {
    /// Resident set of the root process plus all its descendants, in KiB.
    pub total_rss_kib: u64,
    /// High-water mark of the root process's resident set (`VmHWM`), in KiB: catches a spike of
    /// the root that fell between two samples.
    pub root_hwm_kib: u64,
}

/// Most processes of one tree that a sample visits (bounds the cost of a fork bomb).
#[cfg(target_os = "linux")]
const MAX_TREE: usize = 256;

/// Reads the memory of `root` and its descendants; `None` if `root` is gone (or is a zombie, whose
/// status has no memory lines any more) or the platform has no `/proc`.
#[cfg(target_os = "linux")]
pub(crate) fn read_tree(root: u32) -> Option<MemoryReading> {
    let (root_rss_kib, root_hwm_kib) = read_status(root)?;
    let mut reading = MemoryReading {
        total_rss_kib: root_rss_kib,
        root_hwm_kib,
    };
    let mut pending = children(root);
    let mut visited = 1;
    while let Some(pid) = pending.pop() {
        if visited >= MAX_TREE {
            break;
        }
        visited += 1;
        reading.total_rss_kib += read_statm_rss_kib(pid).unwrap_or(0);
        pending.extend(children(pid));
    }
    Some(reading)
}

/// Without `/proc`, memory cannot be watched.
#[cfg(not(target_os = "linux"))]
pub(crate) fn read_tree(_root: u32) -> Option<MemoryReading> {
    None
}

/// Resets the high-water mark (`VmHWM`) of this process to its current resident set, so that
/// a warm function measures the peak of each invocation rather than of its whole life. Does
/// nothing where the kernel refuses (or has no `/proc`). Only the Lambda loop needs it.
#[cfg(feature = "lambda")]
pub(crate) fn reset_own_peak() {
    #[cfg(target_os = "linux")]
    {
        // "5" resets the peak resident set size (proc(5), clear_refs).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
}

/// Whether [`read_tree`] can work on this platform at all.
pub(crate) fn supported() -> bool {
    cfg!(target_os = "linux")
}

/// `(VmRSS, VmHWM)` of a process in KiB, from `/proc/<pid>/status`.
#[cfg(target_os = "linux")]
fn read_status(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status(&status)
}

/// Parses the `VmRSS` and `VmHWM` lines of a `/proc/<pid>/status` (HWM defaults to RSS).
fn parse_status(status: &str) -> Option<(u64, u64)> {
    let mut rss = None;
    let mut hwm = None;
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("VmRSS:") {
            rss = parse_kib(rest);
        } else if let Some(rest) = line.strip_prefix("VmHWM:") {
            hwm = parse_kib(rest);
        }
    }
    let rss = rss?;
    Some((rss, hwm.unwrap_or(rss).max(rss)))
}

/// Parses `"   1234 kB"`.
fn parse_kib(value: &str) -> Option<u64> {
    value.split_whitespace().next()?.parse().ok()
}

/// Resident set of a process in KiB, from `/proc/<pid>/statm` (cheaper than `status`).
#[cfg(target_os = "linux")]
fn read_statm_rss_kib(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_kib())
}

/// Size of a memory page in KiB.
#[cfg(target_os = "linux")]
fn page_kib() -> u64 {
    use std::sync::OnceLock;
    static PAGE_KIB: OnceLock<u64> = OnceLock::new();
    *PAGE_KIB.get_or_init(|| {
        // SAFETY: sysconf has no preconditions; it returns -1 on error, handled below.
        let bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(bytes)
            .ok()
            .filter(|&b| b >= 1024)
            .unwrap_or(4096)
            / 1024
    })
}

/// Direct children of a process: the union of `/proc/<pid>/task/<tid>/children` over its threads
/// (a child is listed under the thread that forked it).
#[cfg(target_os = "linux")]
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let mut path = task.path();
        path.push("children");
        if let Ok(list) = std::fs::read_to_string(&path) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status() {
        let status = "Name:\tsh\nVmPeak:\t  10000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n";
        assert_eq!(parse_status(status), Some((1024, 2048)));
        assert_eq!(parse_status("Name:\tzombie\nState:\tZ (zombie)\n"), None);
        assert_eq!(parse_status("VmRSS:\t 7 kB\n"), Some((7, 7)));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_own_memory_and_tolerates_missing_processes() {
        let me = read_tree(std::process::id()).expect("own /proc entry");
        assert!(me.total_rss_kib > 0);
        assert!(me.root_hwm_kib >= 1);
        // pid_max is at most 2^22, so this pid cannot exist.
        assert_eq!(read_tree(u32::MAX - 1), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn counts_descendants() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        let me = std::process::id();
        let found = children(me).contains(&child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(found, "sleep should be listed among our children");
    }
}
