//! [`IdentityLock`]: one holder per registry identity on this host, whatever the cache
//! directory, user or working directory of the processes that claim it.
//!
//! The lock is a Unix socket bound to an *abstract* address (`\0leafid/<identity>`): the
//! kernel lets one socket at a time hold an address, frees it the moment the holder's
//! last descriptor closes (a SIGKILLed process frees it at once), and there is no file a
//! tmp cleaner or an operator could delete. Abstract addresses live in the network
//! namespace, which matches identities made of an ip address: two containers with their
//! own network stacks are two hosts here too. A lock file would depend on the directory
//! it lives in (two cache directories, two locks); that is why this is not a file.
//!
//! A forked child must not keep its parent's identity: a `pthread_atfork` child handler
//! closes every held socket in the child (the parent keeps its own descriptor).
//! `ss -xap | grep leafid` shows which process holds an identity.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

use crate::error::{Error, Result};

/// Descriptors of held identities, closed in a forked child. A fixed table: the child
/// handler may only do async-signal-safe work (no locks, no allocation).
static HELD: [AtomicI32; 256] = [const { AtomicI32::new(-1) }; 256];

extern "C" fn close_in_child() {
    for slot in &HELD {
        // Only this (single-threaded) child runs here; SeqCst for simplicity.
        let fd = slot.swap(-1, Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: a descriptor this process inherited from a held identity.
            unsafe { libc::close(fd) };
        }
    }
}

fn watch_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a plain extern "C" fn that only closes descriptors.
        unsafe { libc::pthread_atfork(None, None, Some(close_in_child)) };
    });
}

/// The longest address used, in bytes: `sun_path` holds 108 bytes, one of which is the
/// abstract namespace's leading NUL.
const MAX_ADDRESS: usize = 100;

/// The abstract socket address for `identity`: `leafid/<identity>`, or when that is over
/// [`MAX_ADDRESS`] bytes, its first 60 *bytes* (cut back to a character boundary, so the
/// name stays readable in `ss`) and a hash of the whole identity. Counted in bytes, not
/// characters: a `leaf.name` or database name in Chinese takes three bytes a character,
/// and a name cut at 60 characters did not fit, so `bind` failed with EINVAL.
fn address(identity: &str) -> Vec<u8> {
    let name = format!("leafid/{identity}");
    if name.len() <= MAX_ADDRESS {
        return name.into_bytes();
    }
    // FNV-1a: stable across processes and Rust versions.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in identity.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut cut = identity.len().min(60);
    while !identity.is_char_boundary(cut) {
        cut -= 1;
    }
    // 7 + at most 60 + 1 + 16 bytes: within MAX_ADDRESS. Identical to the names of
    // earlier versions for ASCII identities, so old and new processes still exclude
    // each other.
    format!("leafid/{}#{h:016x}", &identity[..cut]).into_bytes()
}

/// Where an identity lock excludes other holders: this boot of this host and this
/// network namespace (abstract socket addresses live in it), as a stable hash; `None`
/// where either cannot be read (no procfs). A record tied to it (a cache file's
/// handover) means nothing in a cache directory copied to another host, shared with
/// another container, or kept across a reboot.
pub fn domain() -> Option<u64> {
    static DOMAIN: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *DOMAIN.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let net = std::fs::read_link("/proc/self/ns/net").ok()?;
        Some(super::cache::fnv1a(
            format!("{}/{}", boot.trim(), net.display()).as_bytes(),
        ))
    })
}

/// The process holding `identity` on this host, found the way `ss -xp` finds it: the
/// socket's inode in `/proc/net/unix`, then the process with a descriptor on it. Best
/// effort (another user's processes are not readable): `None` when not found.
pub fn holder_pid(identity: &str) -> Option<u32> {
    let name = format!("@{}", String::from_utf8_lossy(&address(identity)));
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    // Columns: Num RefCount Protocol Flags Type St Inode Path
    let inode = table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        (cols.len() >= 8 && cols[7] == name).then(|| cols[6].to_string())
    })?;
    let target = format!("socket:[{inode}]");
    for proc_entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = proc_entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// A held identity; released on [`IdentityLock::release`] or drop.
#[derive(Debug)]
pub struct IdentityLock {
    slot: usize,
    fd: i32,
    identity: String,
}

impl IdentityLock {
    /// Claims `identity` on this host: `Ok(None)` when another socket (another
    /// process, or another generator of this one) holds it.
    pub fn try_claim(identity: &str) -> Result<Option<IdentityLock>> {
        watch_forks();
        let addr = address(identity);
        // SAFETY: plain socket(2); CLOEXEC so exec'd programs never inherit the claim.
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(Error::io(
                "an abstract Unix socket",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: a zeroed sockaddr_un is valid; the name fits (at most 107 bytes).
        let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (dst, src) in sa.sun_path[1..].iter_mut().zip(&addr) {
            *dst = *src as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + 1 + addr.len();
        // SAFETY: `sa` is a valid sockaddr_un and `len` covers exactly the used bytes.
        let rc = unsafe {
            libc::bind(
                fd,
                &sa as *const _ as *const libc::sockaddr,
                len as libc::socklen_t,
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(fd) };
            if err.raw_os_error() == Some(libc::EADDRINUSE) {
                return Ok(None);
            }
            return Err(Error::io(
                format!("abstract socket @leafid/{identity}"),
                err,
            ));
        }
        for (slot, cell) in HELD.iter().enumerate() {
            if cell
                .compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Ok(Some(IdentityLock {
                    slot,
                    fd,
                    identity: identity.to_string(),
                }));
            }
        }
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(fd) };
        Err(Error::InvalidConfig(format!(
            "this process already holds {} worker identities; close unused generators",
            HELD.len()
        )))
    }

    /// The identity held.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Frees the identity at once. Idempotent; a no-op in a forked child (whose copy
    /// the fork handler already closed).
    pub fn release(&self) {
        // Only the slot's owner closes: in a child the handler emptied the slot, and
        // the number may since name an unrelated descriptor.
        if HELD[self.slot]
            .compare_exchange(self.fd, -1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            // SAFETY: our own descriptor, closed once (the slot swap above is the guard).
            unsafe { libc::close(self.fd) };
        }
    }
}

impl Drop for IdentityLock {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unique() -> String {
        format!(
            "test/{}/{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        )
    }

    #[test]
    fn one_holder_per_identity_and_free_again_after_release() {
        let id = unique();
        let a = IdentityLock::try_claim(&id).unwrap().expect("free");
        assert!(IdentityLock::try_claim(&id).unwrap().is_none());
        assert_eq!(holder_found(&id), Some(std::process::id()));
        assert!(IdentityLock::try_claim(&format!("{id}x"))
            .unwrap()
            .is_some());
        a.release();
        a.release();
        assert!(IdentityLock::try_claim(&id).unwrap().is_some());
    }

    #[test]
    fn long_identities_are_hashed_and_still_distinct() {
        let base = "y".repeat(300);
        let a = IdentityLock::try_claim(&format!("{base}1{}", unique())).unwrap();
        let b = IdentityLock::try_claim(&format!("{base}2{}", unique())).unwrap();
        assert!(a.is_some() && b.is_some());
    }

    /// Issue 20: a Chinese identity over 100 bytes (but under 60 characters) was cut by
    /// characters, the address did not fit `sun_path`, and `bind` failed with EINVAL.
    /// [`holder_pid`] is best effort (a scan of /proc while other tests' threads open,
    /// close and fork descriptors): found within a few tries (CI missed it once in one).
    fn holder_found(id: &str) -> Option<u32> {
        // Retried up to 1 s: the scan of every process's fds can miss on a loaded machine
        // (it missed once in CI with 5 tries of 20 ms).
        (0..50).find_map(|_| {
            holder_pid(id).or_else(|| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                None
            })
        })
    }

    #[test]
    fn a_long_multi_byte_identity_is_cut_by_bytes_and_claimed() {
        let base = format!(
            "zookeeper/美团点评分布式号段服务订单中心/{}",
            "汉".repeat(30)
        );
        assert!(
            base.chars().count() < 60 && base.len() > 100,
            "{}",
            base.len()
        );
        let id = format!("{base}{}", unique());
        assert!(address(&id).len() <= MAX_ADDRESS, "{}", address(&id).len());
        let a = IdentityLock::try_claim(&id).unwrap().expect("free");
        assert!(IdentityLock::try_claim(&id).unwrap().is_none());
        assert_eq!(holder_found(&id), Some(std::process::id()));
        // Two identities that share the kept prefix stay two (the hash).
        let b = IdentityLock::try_claim(&format!("{id}二")).unwrap();
        assert!(b.is_some());
        a.release();
    }

    #[test]
    fn a_forked_child_does_not_keep_the_identity() {
        let id = unique();
        let held = IdentityLock::try_claim(&id).unwrap().unwrap();
        let (mut go, mut ready) = ([0i32; 2], [0i32; 2]);
        // SAFETY: plain pipe(2)s into two-element arrays.
        assert_eq!(unsafe { libc::pipe(go.as_mut_ptr()) }, 0);
        assert_eq!(unsafe { libc::pipe(ready.as_mut_ptr()) }, 0);
        // SAFETY: fork in a test; the child only does async-signal-safe calls and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // Child: the fork handler has closed its copy of the socket by now. Say so,
            // then wait for the parent's go (EOF if the parent died) and leave.
            let mut b = [0u8; 1];
            // SAFETY: our own pipe ends; _exit skips every destructor.
            unsafe {
                libc::close(go[1]);
                libc::write(ready[1], b"r".as_ptr() as *const _, 1);
                libc::read(go[0], b.as_mut_ptr() as *mut _, 1);
                libc::_exit(0)
            };
        }
        let mut b = [0u8; 1];
        // SAFETY: reading one byte from our pipe.
        unsafe {
            libc::close(ready[1]);
            libc::read(ready[0], b.as_mut_ptr() as *mut _, 1);
        }
        // Parent lets go while the child lives: the identity is free at once.
        held.release();
        let again = IdentityLock::try_claim(&id).unwrap();
        // SAFETY: one byte to our pipe, then reap the child.
        unsafe {
            libc::write(go[1], b"x".as_ptr() as *const _, 1);
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
        }
        assert!(again.is_some(), "the forked child kept the identity");
    }
}
