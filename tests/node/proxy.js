// A loopback TCP proxy for fault tests and benchmarks: it forwards to a server, refuses
// connections (nothing listens on its port) or blackholes them (accepts, then never
// answers: bytes in either direction are dropped, like a silent network partition).
// It runs on the caller's event loop, which is the point: the loop must stay free.
'use strict';
const net = require('node:net');

class Proxy {
  /** A proxy to `host:port`; `start()` it, then point the client at `proxy.port`. */
  constructor(host, port) {
    this.target = { host, port: Number(port) };
    this.mode = 'forward';
    this.port = 0;
    this.conns = new Set();
    this.server = null;
  }

  async start() {
    await this.#listen(0);
    return this;
  }

  #listen(port) {
    this.server = net.createServer((client) => this.#accept(client));
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, '127.0.0.1', () => {
        this.port = this.server.address().port;
        resolve();
      });
    });
  }

  #accept(client) {
    if (this.mode === 'closed') {
      client.destroy();
      return;
    }
    const conn = { client, upstream: null };
    this.conns.add(conn);
    const drop = () => {
      this.conns.delete(conn);
      client.destroy();
      conn.upstream?.destroy();
    };
    client.on('error', drop).on('close', drop);
    if (this.mode !== 'forward') return; // blackholed: held open, never answered
    conn.upstream = net.connect(this.target.port, this.target.host);
    conn.upstream.on('error', drop).on('close', drop);
    client.on('data', (d) => { if (this.mode === 'forward') conn.upstream.write(d); });
    conn.upstream.on('data', (d) => { if (this.mode === 'forward') client.write(d); });
  }

  /** Every byte is dropped from now on; new connections are accepted and ignored. */
  blackhole() {
    this.mode = 'blackhole';
  }

  /** Connections are refused (nothing listens) and open ones are reset. */
  async refuse() {
    this.mode = 'refuse';
    this.#dropAll();
    await new Promise((resolve) => this.server.close(resolve));
  }

  /**
   * Forwards again. Connections that lived through a blackhole lost bytes, so they are
   * closed (as a timed-out connection would be): clients reconnect.
   */
  async forward() {
    const wasRefusing = this.mode === 'refuse';
    this.#dropAll();
    this.mode = 'forward';
    if (wasRefusing) await this.#listen(this.port);
  }

  #dropAll() {
    for (const { client, upstream } of this.conns) {
      client.destroy();
      upstream?.destroy();
    }
    this.conns.clear();
  }

  /** Stops listening and resets every connection, now and later (never waits on clients). */
  async close() {
    const listening = this.mode !== 'refuse';
    this.mode = 'closed';
    this.#dropAll();
    if (listening) this.server.close();
  }
}

/** `url` (`mysql://user:pass@host:port/db?…`) with its host and port replaced by the proxy's. */
function throughProxy(url, proxy) {
  return url.replace(/@[^/]+\//, `@127.0.0.1:${proxy.port}/`);
}

/** The host and port of a `mysql://` URL. */
function hostPort(url) {
  const u = new URL(url);
  return [u.hostname, u.port || '3306'];
}

module.exports = { Proxy, throughProxy, hostPort };
