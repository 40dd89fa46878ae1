//! Opening one connection: TCP connect, ZooKeeper's connect request (a new session or
//! the resumption of one), digest authentication, and reading length-prefixed frames.
//!
//! Apart from the session task because both the first connect ([`Client::connect`](super::Client::connect))
//! and every resumption on another server go through it, with the same refusals
//! ([`Refused`]) to tell apart.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::codec::{
    decode_connect_response, decode_reply_header, Out, MAX_FRAME, OP_AUTH, XID_AUTH,
};
use super::connect_string::Credentials;
use super::records::SessionInfo;

/// Why a handshake failed.
#[derive(Debug)]
pub(super) enum Refused {
    /// The server no longer knows the session.
    Expired,
    /// The server refused the credentials.
    AuthFailed(String),
    /// The server could not be reached or did not answer.
    Unreachable(String),
}

/// Opens a TCP connection to `host` and establishes (or resumes) a session on it, then
/// authenticates with `credentials` and waits for the server to accept them.
/// Returns the stream, the negotiated timeout and the session.
pub(super) async fn handshake(
    host: &str,
    timeout: Duration,
    session: Option<&SessionInfo>,
    last_zxid: i64,
    credentials: Option<&Credentials>,
    limit: Duration,
) -> Result<(TcpStream, Duration, SessionInfo), Refused> {
    let unreachable = |e: &dyn std::fmt::Display| Refused::Unreachable(format!("{host}: {e}"));
    let attempt = async {
        let mut stream = TcpStream::connect(host)
            .await
            .map_err(|e| unreachable(&e))?;
        stream.set_nodelay(true).ok();
        let mut req = Out::default();
        req.i32(0) // protocol version
            // A server that has not seen this yet refuses the session: the client never
            // reads older state than it has already seen.
            .i64(last_zxid)
            .i32(timeout.as_millis().min(i32::MAX as u128) as i32)
            .i64(session.map_or(0, |s| s.id))
            .bytes(session.map_or(&[0u8; 16][..], |s| &s.password))
            .bool(false); // read-only not allowed
        stream
            .write_all(&req.framed())
            .await
            .map_err(|e| unreachable(&e))?;
        let frame = read_frame(&mut stream).await.map_err(|e| unreachable(&e))?;
        let (negotiated, info) = decode_connect_response(&frame).map_err(|e| unreachable(&e))?;
        if negotiated <= 0 {
            return Err(Refused::Expired);
        }
        if let Some(c) = credentials {
            // Before any call: a call that raced ahead of the credentials would run as
            // nobody (and a node it creates with the `auth` ACL would be refused).
            let mut auth = Out::default();
            auth.i32(XID_AUTH)
                .i32(OP_AUTH)
                .i32(0) // type, unused
                .str("digest")
                .bytes(&c.auth);
            stream
                .write_all(&auth.framed())
                .await
                .map_err(|e| unreachable(&e))?;
            let frame = read_frame(&mut stream).await.map_err(|e| unreachable(&e))?;
            let (xid, _, err, _) = decode_reply_header(&frame).map_err(|e| unreachable(&e))?;
            if xid != XID_AUTH {
                return Err(unreachable(&format_args!(
                    "answered the authentication with a reply for xid {xid}"
                )));
            }
            if err != 0 {
                return Err(Refused::AuthFailed(format!(
                    "{host} refused digest authentication as user {:?} (server error {err}); \
                     check the user:password of the connect string",
                    c.user
                )));
            }
        }
        Ok((stream, Duration::from_millis(negotiated as u64), info))
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(r) => r,
        Err(_) => Err(unreachable(&format_args!("no answer within {limit:?}"))),
    }
}

pub(super) async fn read_frame<R: AsyncReadExt + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let n = r.read_i32().await?;
    if n < 0 || n as usize > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {n} bytes"),
        ));
    }
    let mut buf = vec![0u8; n as usize];
    r.read_exact(&mut buf).await?;
    Ok(buf)
}
