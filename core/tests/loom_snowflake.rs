#![cfg(leafid_loom)]
