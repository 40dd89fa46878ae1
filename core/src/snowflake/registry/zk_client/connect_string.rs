//! Connect strings: `[user:password@]host:port[,host:port…][/chroot]`, written
//! ([`connect_string`]), checked ([`check_connect`]), shown without the password
//! ([`shown_connect`]) and taken apart for the client (`parse_connect`).
//!
//! Apart from the session because it is pure text handling, used without any I/O by the
//! registry URL parser as well, and the one place a password is decoded.

use super::error::ZkError;

/// Digest credentials from a connect string.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Credentials {
    pub(super) user: String,
    /// `user:password`, as the `digest` scheme takes it.
    pub(super) auth: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:***", self.user)
    }
}

/// A connect string taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) hosts: Vec<String>,
    /// `/a/b`, never `/` alone nor with a trailing `/`.
    pub(super) chroot: Option<String>,
    pub(super) credentials: Option<Credentials>,
}

/// Bytes kept as they are in a connect string's user and password; the rest is
/// percent-encoded.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if unreserved(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes; `None` for a broken escape or a result that is not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            // Two ASCII hex digits: always parses.
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Writes a connect string: `[user:password@]hosts[/chroot]`, the user and password
/// percent-encoded so that any character may appear in them.
pub fn connect_string(
    hosts: &str,
    chroot: Option<&str>,
    credentials: Option<(&str, &str)>,
) -> String {
    let mut s = String::new();
    if let Some((user, password)) = credentials {
        s.push_str(&percent_encode(user));
        s.push(':');
        s.push_str(&percent_encode(password));
        s.push('@');
    }
    s.push_str(hosts);
    if let Some(chroot) = chroot.filter(|c| *c != "/" && !c.is_empty()) {
        s.push_str(chroot);
    }
    s
}

/// Checks a connect string as [`Client::connect`](super::Client::connect) reads it, without any I/O.
pub fn check_connect(connect: &str) -> Result<(), ZkError> {
    parse_connect(connect).map(drop)
}

/// The connect string with its password replaced by `***`, for messages, descriptions
/// and file names. Everything before the last `@` is taken for credentials when the
/// string does not parse cleanly, so a password is hidden even in a malformed string
/// (a chroot with an `@` in it is then shown cut).
pub fn shown_connect(connect: &str) -> String {
    // One redaction for every URL and connect string (see `crate::redact`).
    crate::redact::url(connect)
}

/// Parses `[user:password@]host:port[,host:port…][/chroot]`.
pub(super) fn parse_connect(connect: &str) -> Result<Target, ZkError> {
    let invalid = |why: &str| ZkError::InvalidConnect(format!("{}: {why}", shown_connect(connect)));
    let (authority, chroot) = match connect.find('/') {
        Some(i) => (&connect[..i], Some(&connect[i..])),
        None => (connect, None),
    };
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((creds, hosts)) => {
            let (user, password) = creds
                .split_once(':')
                .ok_or_else(|| invalid("credentials must be user:password"))?;
            let user = percent_decode(user)
                .ok_or_else(|| invalid("the user is not valid percent-encoded UTF-8"))?;
            let password = percent_decode(password)
                .ok_or_else(|| invalid("the password is not valid percent-encoded UTF-8"))?;
            if user.is_empty() || user.contains(':') {
                return Err(invalid("the user must be non-empty and free of ':'"));
            }
            let auth = format!("{user}:{password}").into_bytes();
            (Some(Credentials { user, auth }), hosts)
        }
        None if connect.contains('@') => {
            return Err(invalid(
                "'@' after the first '/': percent-encode a '/' in a password as %2F",
            ))
        }
        None => (None, authority),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect();
    if hosts.is_empty() {
        return Err(invalid("it names no server"));
    }
    let chroot = match chroot {
        None | Some("/") => None,
        Some(c) => {
            let bad_segment = c[1..]
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == ".." || s.chars().any(char::is_control));
            if bad_segment {
                return Err(invalid(
                    "the chroot must be /segment[/segment…] without empty, '.' or '..' segments \
                     or a trailing '/'",
                ));
            }
            Some(c.to_string())
        }
    };
    Ok(Target {
        hosts,
        chroot,
        credentials,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings() {
        let t = parse_connect("a:1, b:2,").unwrap();
        assert_eq!(t.hosts, vec!["a:1", "b:2"]);
        assert_eq!(t.chroot, None);
        assert_eq!(t.credentials, None);
        assert!(parse_connect("").is_err());
        assert!(parse_connect("/chroot").is_err());
    }

    #[test]
    fn connect_strings_carry_credentials_and_a_chroot() {
        let t = parse_connect("leaf:s%40cr%2Ft%3A@a:1,b:2/apps/leaf").unwrap();
        assert_eq!(t.hosts, vec!["a:1", "b:2"]);
        assert_eq!(t.chroot.as_deref(), Some("/apps/leaf"));
        let c = t.credentials.unwrap();
        assert_eq!(c.user, "leaf");
        assert_eq!(c.auth, b"leaf:s@cr/t:".to_vec());
        // "/" alone is no chroot, as in Java.
        assert_eq!(parse_connect("a:1/").unwrap().chroot, None);
        for bad in [
            "a:1/x/",
            "a:1//x",
            "a:1/x/../y",
            "nopass@a:1",
            ":p@a:1",
            "u:%zz@a:1",
        ] {
            assert!(parse_connect(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn connect_string_round_trips_any_password() {
        let pw = "p@ss:w/rd%?#,é";
        let s = connect_string("a:1,b:2", Some("/x/y"), Some(("u", pw)));
        let t = parse_connect(&s).unwrap();
        assert_eq!(t.credentials.unwrap().auth, format!("u:{pw}").into_bytes());
        assert_eq!(t.chroot.as_deref(), Some("/x/y"));
        assert_eq!(t.hosts, vec!["a:1", "b:2"]);
        assert_eq!(connect_string("a:1", None, None), "a:1");
    }

    proptest::proptest! {
        #[test]
        fn any_credentials_survive_the_connect_string(
            user in "[^:]{1,12}",
            password in "\\PC{0,24}",
        ) {
            let s = connect_string("h:1", Some("/c"), Some((&user, &password)));
            let c = parse_connect(&s).unwrap().credentials.unwrap();
            proptest::prop_assert_eq!(c.user, user.clone());
            proptest::prop_assert_eq!(c.auth, format!("{user}:{password}").into_bytes());
        }
    }

    #[test]
    fn shown_connect_hides_the_password_even_in_a_malformed_string() {
        assert_eq!(shown_connect("u:secret@a:1,b:2/r"), "u:***@a:1,b:2/r");
        assert_eq!(shown_connect("a:1,b:2/r"), "a:1,b:2/r");
        for s in [
            "u:sec/ret@a:1/r",
            "u:secret@",
            "secret@a:1",
            "u:se@cret@a:1",
        ] {
            let shown = shown_connect(s);
            assert!(
                !shown.contains("secret") && !shown.contains("cret"),
                "{s} -> {shown}"
            );
        }
        // Errors about a connect string show it the same way.
        let e = parse_connect("u:secret@/x/").unwrap_err();
        assert!(!format!("{e} {e:?}").contains("secret"), "{e:?}");
    }
}
