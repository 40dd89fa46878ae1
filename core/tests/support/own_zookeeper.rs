//! A ZooKeeper server of a test's own on a free loopback port, for a test that must
//! change something of the server's that the shared one (`LEAFID_ZK`) must keep: here
//! its wall clock, through libfaketime. Started from the same jars as
//! `scripts/services.sh` starts the shared one; stopped (SIGKILL) when dropped.

#![allow(dead_code)] // each test binary that includes this file uses part of it

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server process and its data directory.
pub struct OwnZookeeper {
    /// `127.0.0.1:port`, for a `zookeeper://` URL.
    pub addr: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl OwnZookeeper {
    /// Starts a server, with `setup` applied to its command (an environment), and waits
    /// until it serves (a JVM start: a few seconds).
    pub fn start(setup: impl FnOnce(&mut Command)) -> OwnZookeeper {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        std::fs::write(
            dir.path().join("zoo.cfg"),
            format!(
                "tickTime=500\ninitLimit=20\nsyncLimit=10\ndataDir={}\nclientPort={port}\n\
                 clientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=srvr\nminSessionTimeout=1000\nmaxSessionTimeout=60000\n\
                 forceSync=no\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let mut command = Command::new("java");
        command
            .args(["-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Djava.net.preferIPv4Stack=true")
            .arg("-cp")
            .arg(
                "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:\
                 /usr/share/java/log4j-1.2.jar",
            )
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(dir.path().join("zoo.cfg"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        setup(&mut command);
        let child = command
            .spawn()
            .expect("start java (ZooKeeper: scripts/services.sh installs it)");
        let zk = OwnZookeeper {
            addr: format!("127.0.0.1:{port}"),
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !zk.answers() {
            assert!(
                Instant::now() < deadline,
                "ZooKeeper on {} never started",
                zk.addr
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        zk
    }

    fn answers(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(&self.addr) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut reply = String::new();
        // `srvr`, not `ruok`: `ruok` answers before the server serves sessions.
        s.write_all(b"srvr").is_ok()
            && s.read_to_string(&mut reply).is_ok()
            && reply.contains("Mode: ")
    }
}

impl Drop for OwnZookeeper {
    fn drop(&mut self) {
        // Our own child, by its handle; waited for, so no zombie stays.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
