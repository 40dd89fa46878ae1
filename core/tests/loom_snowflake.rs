#![cfg(loom)]
