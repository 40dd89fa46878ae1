//! Which network or cluster filesystem, if any, a path lives on.
//!
//! File locks (SQLite's, and `flock`) are emulated with other semantics, or cover one
//! client only, on NFS and its kin: a SQLite database there could hand two processes
//! the same segment. Below both modes because both refuse such a path: the SQLite
//! store here, and the snowflake registries' lock files (`local:`, the cache
//! directory, through `host_lock`).

use std::path::Path;

use crate::error::{Error, Result};

/// The kind of network or cluster filesystem `dir` is on (`"NFS"`, `"FUSE"`, …), `None`
/// for a local one. Shared by every user of file locks: `local:`, the cache directory's
/// locks, and the SQLite segment store (whose locking is no more reliable there).
pub fn network_fs(dir: &Path) -> Result<Option<&'static str>> {
    const NFS: i64 = 0x6969;
    const SMB: i64 = 0x517b;
    const CIFS: i64 = 0xff53_4d42;
    const SMB2: i64 = 0xfe53_4d42;
    const CEPH: i64 = 0x00c3_6400;
    const V9FS: i64 = 0x0102_1997;
    const AFS: i64 = 0x5346_414f;
    // FUSE (GlusterFS, JuiceFS, s3fs, sshfs, …), Lustre, GPFS, GFS2, OCFS2, BeeGFS: locks
    // emulated per client or cluster-wide with other semantics.
    const FUSE: i64 = 0x6573_5546;
    const LUSTRE: i64 = 0x0bd0_0bd0;
    const GPFS: i64 = 0x4750_4653;
    const GFS2: i64 = 0x0116_1970;
    const OCFS2: i64 = 0x7461_636f;
    const BEEGFS: i64 = 0x1999_0113;
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::InvalidConfig(format!("{} contains a NUL byte", dir.display())))?;
    // SAFETY: a zeroed statfs is a valid out-parameter; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path pointer and out-parameter for the duration of the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(Error::io(dir, std::io::Error::last_os_error()));
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between libc targets
    let kind = st.f_type as i64 & 0xffff_ffff;
    let name = match kind {
        NFS => "NFS",
        SMB | CIFS | SMB2 => "SMB/CIFS",
        CEPH => "Ceph",
        V9FS => "9p",
        AFS => "AFS",
        FUSE => "FUSE",
        LUSTRE => "Lustre",
        GPFS => "GPFS",
        GFS2 => "GFS2",
        OCFS2 => "OCFS2",
        BEEGFS => "BeeGFS",
        _ => return Ok(None),
    };
    Ok(Some(name))
}
