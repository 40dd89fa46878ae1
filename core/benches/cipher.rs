//! Opaque and string ids: cost per id of `IdCipher` (FF1 with AES-128 and AES-256)
//! and of base-62, against floors and a peer in the same run: one raw AES-128 block
//! (FF1 costs ten), the `fpe` crate's general FF1 on the same 63 bits, and
//! `i64::to_string` (what a decimal string id costs).
//!
//! Run: `cargo bench -p leafid --bench cipher`. Figures: benches/README.md.

use std::hint::black_box;

use aes::cipher::{BlockCipherEncrypt, KeyInit};
use aes::Aes128;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fpe::ff1::{FlexibleNumeralString, FF1};
use leafid::{decode_base62, encode_base62, IdCipher};

fn cipher(c: &mut Criterion) {
    let mut group = c.benchmark_group("cipher");
    group.throughput(Throughput::Elements(1));
    let aes = Aes128::new(&[7u8; 16].into());
    let mut block = [0u8; 16].into();
    group.bench_function("floor: one AES-128 block", |b| {
        b.iter(|| {
            aes.encrypt_block(black_box(&mut block));
        })
    });
    let general = FF1::<Aes128>::new(&[7u8; 16], 2).unwrap();
    let bits = FlexibleNumeralString::from(vec![1u16; 63]);
    group.bench_function("peer: fpe crate FF1, radix 2, 63 numerals (AES-128)", |b| {
        b.iter(|| black_box(general.encrypt(&[], black_box(&bits)).unwrap()))
    });
    for (label, key) in [("AES-128", vec![7u8; 16]), ("AES-256", vec![7u8; 32])] {
        let cipher = IdCipher::new(&key).unwrap();
        let mut id = 1_000_000i64;
        group.bench_function(format!("encrypt ({label})"), |b| {
            b.iter(|| {
                id += 1;
                black_box(cipher.encrypt(black_box(id)).unwrap())
            })
        });
        group.bench_function(format!("decrypt ({label})"), |b| {
            b.iter(|| {
                id += 1;
                black_box(cipher.decrypt(black_box(id)).unwrap())
            })
        });
    }
    let cipher = IdCipher::new(&[7u8; 16]).unwrap();
    let n = 1_000usize;
    let mut buf: Vec<i64> = (1..=n as i64).collect();
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function("encrypt_in_place 1000 (AES-128)", |b| {
        b.iter(|| {
            for (i, id) in buf.iter_mut().enumerate() {
                *id = i as i64 + 1;
            }
            cipher.encrypt_in_place(&mut buf).unwrap();
            black_box(buf[n - 1])
        })
    });
    group.finish();

    let mut group = c.benchmark_group("base62");
    group.throughput(Throughput::Elements(1));
    let id = 2_124_926_727_518_965_824i64;
    group.bench_function("floor: i64::to_string", |b| {
        b.iter(|| black_box(black_box(id).to_string()))
    });
    group.bench_function("encode_base62", |b| {
        b.iter(|| black_box(encode_base62(black_box(id)).unwrap()))
    });
    let s = encode_base62(id).unwrap();
    group.bench_function("decode_base62", |b| {
        b.iter(|| black_box(decode_base62(black_box(&s)).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, cipher);
criterion_main!(benches);
