//! [`HostLock`]: an exclusive `flock` on a file, tied to that file's path.
//!
//! Used by `local` (one lock file per worker id) and by the generator beside the worker
//! cache file of every registry whose id comes from configuration (`fixed`, `zookeeper`,
//! `mysql`), so that two processes (or two generators in one process) on one host never
//! hold one identity at once.
//!
//! `flock` (not `fcntl`) on purpose: its locks belong to the open file description, so two
//! generators in one process exclude each other, and closing an unrelated descriptor of
//! the same file does not drop the lock. The kernel drops it when the holder's last
//! descriptor closes, so a process that dies (even by SIGKILL) frees the lock at once.
//!
//! A lock only excludes processes that lock the *same inode*. A lock file unlinked or
//! replaced under its holder (systemd-tmpfiles, an operator cleaning the directory) would
//! let the next process lock a fresh inode at the same path while the first still
//! issues. So taking a lock re-checks that the path still names the locked inode, and
//! [`HostLock::check`] (run on every heartbeat) fails once it does not: the holder stops
//! issuing. Network filesystems, where `flock` is emulated or local to one client, are
//! refused ([`refuse_network_fs`]).

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Who holds a lock, written into the lock file by the holder for messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// When it took the lock (ms since the Unix epoch, local clock).
    pub since_ms: i64,
    /// Where its pid means something: the kernel's boot id and the pid namespace
    /// ([`pid_space`]); absent in records older leafids wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_space: Option<String>,
}

impl Holder {
    /// This process, now.
    pub fn this_process() -> Holder {
        // At most 100 characters: the record must fit the databases' 255-character
        // holder_info column beside the other fields (a host name may have 255).
        let mut host = host_name();
        if let Some((cut, _)) = host.char_indices().nth(100) {
            host.truncate(cut);
        }
        Holder {
            host,
            pid: std::process::id(),
            since_ms: super::system_now_ms(),
            pid_space: pid_space(),
        }
    }

    #[cfg(any(feature = "mysql", feature = "postgres"))] // the registries that take a dead holder's lease
    /// True when this holder was a process of this host and pid namespace that has
    /// exited, so its lease can be taken at once. A host name alone is no proof: two
    /// containers given one `hostname:` (compose replicas) each have their own pid 1,
    /// and another's pid is "not running" here while it runs there. A record without a
    /// pid space (an older leafid's) is never taken for dead: its lease runs out instead.
    pub fn exited_here(&self) -> bool {
        self.host == Holder::this_process().host
            && self.pid_space.is_some()
            && self.pid_space == pid_space()
            && !pid_alive(self.pid)
    }
}

/// This process's pid space: the kernel's boot id (`/proc/sys/kernel/random/boot_id`)
/// and its pid namespace (`/proc/self/ns/pid`), or `None` where either cannot be read
/// (no procfs): then no holder is ever taken for dead by its pid.
pub fn pid_space() -> Option<String> {
    static SPACE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    SPACE
        .get_or_init(|| {
            let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
            Some(format!("{}/{}", boot.trim(), ns.display()))
        })
        .clone()
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} on {} since {} ms since the Unix epoch",
            self.pid, self.host, self.since_ms
        )
    }
}

/// This host's name (`gethostname`), or "unknown".
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success
    // when the name fits, and we stop at the first NUL or the buffer's end.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Refuses a directory on a network filesystem (NFS, SMB/CIFS, Ceph, 9p, AFS), where
/// `flock` is emulated with other semantics or covers one client only, so it cannot
/// keep two hosts (or even two processes) from one worker id.
pub fn refuse_network_fs(dir: &Path) -> Result<()> {
    let Some(name) = network_fs(dir)? else {
        return Ok(());
    };
    Err(Error::InvalidConfig(format!(
        "{} is on a network filesystem ({name}), where file locks cannot keep two processes from \
         one worker id; use a local directory (e.g. under /run or /var/lib) for local:// and the \
         cache directory, or zookeeper-recycle:// for hosts that share storage",
        dir.display()
    )))
}

pub use crate::db::network_fs::network_fs;

/// An exclusive lock on a file, held while this value lives (or until [`HostLock::unlock`]).
#[derive(Debug)]
pub struct HostLock {
    path: PathBuf,
    /// The locked file; `None` once unlocked or forgotten after a fork.
    file: Mutex<Option<File>>,
    dev: u64,
    ino: u64,
}

/// What [`HostLock::try_lock`] found.
#[derive(Debug)]
pub enum Attempt {
    /// The lock is ours.
    Locked(HostLock),
    /// Another open file holds it; the holder as written in the file, when readable.
    Held(Option<Holder>),
}

impl HostLock {
    /// Tries to lock `path` (created 0644 when missing, symlinks refused) without waiting.
    pub fn try_lock(path: &Path) -> Result<Attempt> {
        // A lock file unlinked between our open and our flock would be a lock on an
        // orphan inode: retry until the path still names the inode we locked.
        for _ in 0..16 {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .map_err(|e| open_error(path, e))?;
            // SAFETY: a valid descriptor we own; LOCK_NB makes the call return at once.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    return Ok(Attempt::Held(read_holder(&mut file)));
                }
                return Err(flock_error(path, err));
            }
            let meta = file.metadata().map_err(|e| Error::io(path, e))?;
            match std::fs::symlink_metadata(path) {
                Ok(now) if now.dev() == meta.dev() && now.ino() == meta.ino() => {}
                // Replaced or unlinked while we locked: the lock guards nothing; again.
                Ok(_) | Err(_) => continue,
            }
            let holder = Holder::this_process();
            let body = serde_json::to_vec(&holder).expect("a holder always serializes");
            // The holder record is for messages only; failing to write it is harmless.
            let _ = file.set_len(0);
            let _ = file.rewind();
            let _ = file.write_all(&body);
            return Ok(Attempt::Locked(HostLock {
                path: path.to_path_buf(),
                file: Mutex::new(Some(file)),
                dev: meta.dev(),
                ino: meta.ino(),
            }));
        }
        Err(Error::InvalidConfig(format!(
            "{} keeps being replaced while it is locked; is another program deleting files in {}?",
            path.display(),
            path.parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        )))
    }

    /// Makes a child forked while this lock is held close its copy of the descriptor at
    /// once (in the fork handler), for a lock held only for a moment by one thread: the
    /// child never runs that thread's unlock, and if the parent died before unlocking,
    /// the child's copy would hold the lock until the child exits. Not for locks whose
    /// owner closes them in the child itself ([`forget_inherited`](Self::forget_inherited)):
    /// the descriptor would be closed twice. Undone by [`unlock`](Self::unlock).
    pub fn close_in_children(&self) {
        crate::runtime::watch_forks();
        let guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(file) = guard.as_ref() {
            in_flight::add(file.as_raw_fd());
        }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fails when the lock no longer guards the path: the file was unlinked or replaced
    /// (another process may since have locked a new file there), or it was unlocked.
    pub fn check(&self) -> Result<()> {
        let guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let Some(file) = guard.as_ref() else {
            return Err(self.lost("the lock was released"));
        };
        let meta = file.metadata().map_err(|e| Error::io(&self.path, e))?;
        if meta.nlink() == 0 {
            return Err(self.lost("the lock file was deleted"));
        }
        match std::fs::symlink_metadata(&self.path) {
            Ok(now) if now.dev() == self.dev && now.ino() == self.ino => Ok(()),
            Ok(_) => Err(self.lost("the lock file was replaced by another file")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(self.lost("the lock file was deleted"))
            }
            Err(e) => Err(Error::io(&self.path, e)),
        }
    }

    fn lost(&self, why: &str) -> Error {
        Error::LeaseLost {
            worker_id: u32::MAX,
            cause: format!(
                "{why} ({}); another process may now hold the same worker id, so issuing stops \
                 (keep the directory out of tmp cleaners such as systemd-tmpfiles)",
                self.path.display()
            ),
        }
    }

    /// Marks the lock file as in use (its modification time), so age-based cleaners
    /// such as systemd-tmpfiles never take it from a live holder.
    pub fn touch(&self) {
        let guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(file) = guard.as_ref() {
            let _ = file.set_modified(std::time::SystemTime::now());
        }
    }

    /// Unlocks and closes the file: the lock is free at once, even if a forked child
    /// still holds a copy of the descriptor.
    pub fn unlock(&self) {
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(file) = file {
            // SAFETY: a valid descriptor we own.
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
            // Before the close: a fork from here on copies an unlocked descriptor, and the
            // number is never left listed once it may name another file.
            in_flight::remove(file.as_raw_fd());
        }
    }

    /// In a child after `fork()`: closes this process's copy of the descriptor without
    /// unlocking (the parent still owns the lock; keeping the copy open would hold the
    /// parent's lock after it exits).
    pub fn forget_inherited(&self) {
        // try_lock: a parent thread may have held the mutex at the fork; then the copy
        // stays open until this process exits, which is safe, only less prompt.
        if let Ok(mut file) = self.file.try_lock() {
            drop(file.take());
        }
    }
}

/// Descriptors of locks held for a moment by one thread ([`HostLock::close_in_children`]),
/// which a forked child closes in the fork handler ([`close_inherited_in_flight`]).
/// Atomics, not a lock: the handler runs in the child right after `fork()`, where a
/// lock another thread held at the fork would stay locked forever.
mod in_flight {
    use std::sync::atomic::{AtomicI32, Ordering};

    /// Far more than the renews one process has in flight at once (one per generator
    /// with a statefulset floor directory, a renew at a time).
    const SLOTS: usize = 64;
    const EMPTY: i32 = -1;
    #[allow(clippy::declare_interior_mutable_const)] // the array's initializer only
    const FREE: AtomicI32 = AtomicI32::new(EMPTY);
    static HELD: [AtomicI32; SLOTS] = [FREE; SLOTS];

    /// Lists `fd`. With every slot taken it stays unlisted: a child forked then keeps
    /// the lock only while it outlives a parent that died holding it (logged).
    pub(super) fn add(fd: i32) {
        // SeqCst: a fork on another thread must see the descriptor listed once the
        // caller goes on to rely on it (the listing is its only promise).
        if !HELD.iter().any(|s| {
            s.compare_exchange(EMPTY, fd, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        }) {
            tracing::warn!(
                fd,
                "more lock files in flight than slots; a forked child keeps this one"
            );
        }
    }

    pub(super) fn remove(fd: i32) {
        for slot in &HELD {
            // SeqCst: paired with `add` and the child's read.
            let _ = slot.compare_exchange(fd, EMPTY, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// In the child: closes every listed descriptor and forgets it. The threads that
    /// would have unlocked and closed them do not exist in the child.
    pub(super) fn close_all() {
        for slot in &HELD {
            let fd = slot.swap(EMPTY, Ordering::SeqCst);
            if fd != EMPTY {
                // SAFETY: listed only while its HostLock owns it open (listed after
                // the open, unlisted before the close), and that owner's thread is gone
                // in the child, so nothing else closes this copy. close() is
                // async-signal-safe.
                unsafe { libc::close(fd) };
            }
        }
    }
}

/// Called by the fork handler in a child (`runtime`): closes the child's copies of the
/// locks other threads held for a moment at the fork ([`HostLock::close_in_children`]).
pub(crate) fn close_inherited_in_flight() {
    in_flight::close_all();
}

/// The error for a lock file that cannot be opened: another owner's file (written by a
/// container running as another uid, say) said so, not as a bare I/O error.
fn open_error(path: &Path, e: std::io::Error) -> Error {
    if e.kind() != std::io::ErrorKind::PermissionDenied {
        return Error::io(path, e);
    }
    let owner = std::fs::symlink_metadata(path)
        .map(|m| format!("owned by uid {} with mode {:o}", m.uid(), m.mode() & 0o7777))
        .unwrap_or_else(|_| "in a directory this process may not write".into());
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    Error::InvalidConfig(format!(
        "cannot open lock file {} for writing ({e}): it is {owner}, and this process runs as          uid {uid}; run every process that shares the directory as one uid (a pod's          securityContext.runAsUser, or fsGroup with group-writable files), or give the file to          this uid",
        path.display()
    ))
}

/// The error for a lock that cannot be taken at all: a filesystem without `flock` said
/// so, not as a bare I/O error that reads like something to retry.
fn flock_error(path: &Path, e: std::io::Error) -> Error {
    let code = e.raw_os_error();
    if code != Some(libc::ENOLCK) && code != Some(libc::EOPNOTSUPP) && code != Some(libc::EINVAL) {
        return Error::io(path, e);
    }
    Error::InvalidConfig(format!(
        "the filesystem of {} does not support file locks ({e}); on NFS, mount without `nolock`          and run the lock service (rpc.statd for NFSv3) or use NFSv4; otherwise move the          directory to a filesystem with locks",
        path.display()
    ))
}

/// Reads the holder record of a held lock file (for messages).
fn read_holder(file: &mut File) -> Option<Holder> {
    let mut buf = Vec::new();
    file.rewind().ok()?;
    file.take(4096).read_to_end(&mut buf).ok()?;
    serde_json::from_slice(&buf).ok()
}

/// Whether process `pid` on this host is alive (`kill(pid, 0)`; EPERM means alive).
#[cfg(any(feature = "mysql", feature = "postgres", feature = "zookeeper"))] // the registries that record a holder's pid
pub(crate) fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked(a: Attempt) -> HostLock {
        match a {
            Attempt::Locked(l) => l,
            Attempt::Held(h) => panic!("held by {h:?}"),
        }
    }

    #[test]
    fn a_second_open_in_one_process_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let first = locked(HostLock::try_lock(&path).unwrap());
        match HostLock::try_lock(&path).unwrap() {
            Attempt::Held(Some(h)) => assert_eq!(h.pid, std::process::id()),
            other => panic!("expected held, got {other:?}"),
        }
        first.unlock();
        locked(HostLock::try_lock(&path).unwrap());
    }

    #[test]
    fn check_fails_once_the_lock_file_is_unlinked_or_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = locked(HostLock::try_lock(&path).unwrap());
        held.check().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(held.check(), Err(Error::LeaseLost { .. })));
        // A newcomer locks a new inode at the same path; the old holder stays refused.
        let newcomer = locked(HostLock::try_lock(&path).unwrap());
        newcomer.check().unwrap();
        assert!(held.check().is_err());
        std::fs::write(dir.path().join("y"), b"").unwrap();
        std::fs::rename(dir.path().join("y"), &path).unwrap();
        assert!(newcomer.check().is_err());
    }

    #[test]
    fn symlinked_lock_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"").unwrap();
        let path = dir.path().join("x.lock");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(matches!(HostLock::try_lock(&path), Err(Error::Io { .. })));
    }

    #[test]
    fn a_filesystem_without_locks_is_named_not_reported_as_io() {
        let path = Path::new("/mnt/floor/worker-3.lock");
        let e = flock_error(path, std::io::Error::from_raw_os_error(libc::ENOLCK));
        match e {
            Error::InvalidConfig(m) => assert!(m.contains("does not support file locks"), "{m}"),
            other => panic!("{other:?}"),
        }
        // Anything else stays an I/O error with its cause.
        let e = flock_error(path, std::io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
    }

    #[test]
    fn local_directories_are_accepted() {
        let dir = tempfile::tempdir().unwrap();
        refuse_network_fs(dir.path()).unwrap();
    }
}
