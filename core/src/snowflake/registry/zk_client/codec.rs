//! ZooKeeper's wire format (jute): the protocol's operation codes, the record encoder
//! [`Out`] and decoder [`In`], and one decoder per reply the client reads.
//!
//! Apart from the session and the calls because it is the part that reads bytes from
//! the network: every decoder returns an error for anything that does not parse and
//! none panics or allocates more than its input, which the fuzzer (`core/fuzz/`,
//! through [`fuzz_decoders`](super::fuzz_decoders)) and the property tests check here
//! alone.

use super::error::ZkError;
use super::records::{Acl, CreateMode, MultiError, OpResult, SessionInfo, Stat};

// Operation codes of the protocol.
pub(super) const OP_CREATE: i32 = 1;
pub(super) const OP_DELETE: i32 = 2;
pub(super) const OP_EXISTS: i32 = 3;
pub(super) const OP_GET_DATA: i32 = 4;
pub(super) const OP_SET_DATA: i32 = 5;
pub(super) const OP_GET_CHILDREN: i32 = 8;
pub(super) const OP_PING: i32 = 11;
pub(super) const OP_CHECK: i32 = 13;
pub(super) const OP_MULTI: i32 = 14;
pub(super) const OP_CREATE2: i32 = 15;
pub(super) const OP_AUTH: i32 = 100;
pub(super) const OP_CLOSE: i32 = -11;
/// The type of a multi result that reports an error.
pub(super) const OP_ERROR: i32 = -1;
pub(super) const XID_WATCH_EVENT: i32 = -1;
pub(super) const XID_PING: i32 = -2;
pub(super) const XID_AUTH: i32 = -4;
/// ZooKeeper refuses frames past 1 MiB by default; a little slack for headers.
pub(super) const MAX_FRAME: usize = 4 << 20;

/// Permission bits of an ACL entry.
pub(super) const PERM_READ: i32 = 1;
pub(super) const PERM_ALL: i32 = 31;

impl Acl {
    pub(super) fn write(self, out: &mut Out) {
        match self {
            Acl::Open => {
                out.i32(1).i32(PERM_ALL).str("world").str("anyone");
            }
            Acl::CreatorAllAnyoneRead => {
                out.i32(2).i32(PERM_ALL).str("auth").str("");
                out.i32(PERM_READ).str("world").str("anyone");
            }
        }
    }
}

/// Encodes jute records.
#[derive(Default)]
pub(super) struct Out(pub(super) Vec<u8>);

impl Out {
    pub(super) fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(super) fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(super) fn bool(&mut self, v: bool) -> &mut Self {
        self.0.push(v as u8);
        self
    }
    pub(super) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.i32(v.len() as i32);
        self.0.extend_from_slice(v);
        self
    }
    pub(super) fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    pub(super) fn create(
        &mut self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        acl: Acl,
    ) -> &mut Self {
        self.str(path).bytes(data);
        acl.write(self);
        self.i32(mode.flags())
    }
    /// Prefixes the record with its length, as every frame is.
    pub(super) fn framed(self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.0.len() + 4);
        v.extend_from_slice(&(self.0.len() as i32).to_be_bytes());
        v.extend_from_slice(&self.0);
        v
    }
}

/// Decodes jute records. Every length read from the input is checked against the bytes
/// left before anything is allocated for it, so a hostile length cannot cost memory.
pub(super) struct In<'a>(pub(super) &'a [u8]);

impl In<'_> {
    pub(super) fn take(&mut self, n: usize) -> Result<&[u8], ZkError> {
        if self.0.len() < n {
            return Err(ZkError::Protocol("reply shorter than its record".into()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub(super) fn i32(&mut self) -> Result<i32, ZkError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(super) fn i64(&mut self) -> Result<i64, ZkError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(i64::from_be_bytes(a))
    }
    pub(super) fn bool(&mut self) -> Result<bool, ZkError> {
        Ok(self.take(1)?[0] != 0)
    }
    pub(super) fn bytes(&mut self) -> Result<Vec<u8>, ZkError> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(Vec::new());
        }
        // `take` checks `n` against what is left before `to_vec` allocates.
        Ok(self.take(n as usize)?.to_vec())
    }
    pub(super) fn string(&mut self) -> Result<String, ZkError> {
        String::from_utf8(self.bytes()?)
            .map_err(|_| ZkError::Protocol("a name is not UTF-8".into()))
    }
    pub(super) fn stat(&mut self) -> Result<Stat, ZkError> {
        let czxid = self.i64()?;
        let mzxid = self.i64()?;
        let ctime = self.i64()?;
        let mtime = self.i64()?;
        let version = self.i32()?;
        self.take(8)?; // cversion, aversion
        let ephemeral_owner = self.i64()?;
        self.take(16)?; // dataLength, numChildren, pzxid
        Ok(Stat {
            czxid,
            mzxid,
            ctime,
            mtime,
            version,
            ephemeral_owner,
        })
    }
}

// Reply decoders. Each takes the bytes of one record and returns an error for anything
// that does not parse; none panics or allocates more than its input (see `fuzz_decoders`).

/// A reply header: `(xid, zxid, error code)` and the body after it.
pub(super) fn decode_reply_header(frame: &[u8]) -> Result<(i32, i64, i32, &[u8]), ZkError> {
    let mut r = In(frame);
    let xid = r.i32()?;
    let zxid = r.i64()?;
    let err = r.i32()?;
    Ok((xid, zxid, err, r.0))
}

/// A connect response: the negotiated timeout in ms (0 or less: the session is gone)
/// and the session.
pub(super) fn decode_connect_response(frame: &[u8]) -> Result<(i32, SessionInfo), ZkError> {
    let mut r = In(frame);
    r.i32()?; // protocol version
    let negotiated = r.i32()?;
    let id = r.i64()?;
    let password = r.bytes()?;
    // A trailing read-only flag may follow (servers since 3.4); it is not used.
    Ok((negotiated, SessionInfo { id, password }))
}

/// A watch event: `(type, state, path)`.
pub(super) fn decode_watch_event(body: &[u8]) -> Result<(i32, i32, String), ZkError> {
    let mut r = In(body);
    Ok((r.i32()?, r.i32()?, r.string()?))
}

pub(super) fn decode_stat(body: &[u8]) -> Result<Stat, ZkError> {
    In(body).stat()
}

pub(super) fn decode_get_data(body: &[u8]) -> Result<(Vec<u8>, Stat), ZkError> {
    let mut r = In(body);
    Ok((r.bytes()?, r.stat()?))
}

pub(super) fn decode_children(body: &[u8]) -> Result<Vec<String>, ZkError> {
    let mut r = In(body);
    let n = r.i32()?.max(0) as usize;
    // Each name takes at least its 4-byte length: a count past that is a lie, and must
    // not size an allocation.
    if n > r.0.len() / 4 {
        return Err(ZkError::Protocol(format!(
            "{n} children announced in {} bytes",
            r.0.len()
        )));
    }
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        names.push(r.string()?);
    }
    Ok(names)
}

pub(super) fn decode_path(body: &[u8]) -> Result<String, ZkError> {
    In(body).string()
}

/// A multi reply as the session task hands it over: the reply header's error code, then
/// the results (see `Session::serve`). `ops` is how many operations were sent.
pub(super) fn decode_multi(body: &[u8], ops: usize) -> Result<Vec<OpResult>, MultiError> {
    let whole = |error| MultiError { op: None, error };
    let mut r = In(body);
    let header_err = r.i32().map_err(whole)?;
    let mut results = Vec::with_capacity(ops.min(body.len()));
    for i in 0..ops {
        let kind = r.i32().map_err(whole)?;
        let done = r.bool().map_err(whole)?;
        r.i32().map_err(whole)?; // the header's own error field; the result has it too
        if done {
            break;
        }
        let result = match kind {
            OP_ERROR => {
                let code = r.i32().map_err(whole)?;
                // -2 (runtime inconsistency) marks the operations rolled back
                // because another one failed; report the one that did.
                if code != 0 && code != -2 {
                    return Err(MultiError {
                        op: Some(i),
                        error: ZkError::from_code(code),
                    });
                }
                continue;
            }
            OP_CREATE => OpResult::Create(r.string().map_err(whole)?),
            OP_CREATE2 => {
                let path = r.string().map_err(whole)?;
                r.stat().map_err(whole)?;
                OpResult::Create(path)
            }
            OP_SET_DATA => OpResult::SetData(r.stat().map_err(whole)?),
            OP_CHECK => OpResult::Check,
            OP_DELETE => OpResult::Delete,
            other => {
                return Err(whole(ZkError::Protocol(format!(
                    "multi result of unknown type {other}"
                ))))
            }
        };
        results.push(result);
    }
    if header_err != 0 {
        return Err(whole(ZkError::from_code(header_err)));
    }
    if results.len() != ops {
        return Err(whole(ZkError::Protocol(format!(
            "{} results for {ops} operations",
            results.len()
        ))));
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut o = Out::default();
        o.i32(-7).i64(1 << 40).bool(true).str("/a/b").bytes(&[]);
        let mut r = In(&o.0);
        assert_eq!(r.i32().unwrap(), -7);
        assert_eq!(r.i64().unwrap(), 1 << 40);
        assert!(r.bool().unwrap());
        assert_eq!(r.string().unwrap(), "/a/b");
        assert_eq!(r.bytes().unwrap(), Vec::<u8>::new());
        assert!(r.i32().is_err());
    }

    #[test]
    fn decoders_refuse_lengths_past_the_input() {
        // A children count of i32::MAX in eight bytes: refused before any allocation.
        let mut o = Out::default();
        o.i32(i32::MAX).i32(0);
        assert!(decode_children(&o.0).is_err());
        let mut o = Out::default();
        o.i32(i32::MAX);
        assert!(decode_path(&o.0).is_err());
        // A multi reply that ends early is an error, not a short success.
        let mut o = Out::default();
        o.i32(0).i32(OP_CHECK).bool(false).i32(0);
        assert!(decode_multi(&o.0, 2).is_err());
        assert_eq!(decode_multi(&o.0, 1).unwrap(), vec![OpResult::Check]);
    }
}
