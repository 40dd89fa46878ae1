"""Opaque ids (IdCipher), base-62 strings and the JS-safe layout from Python."""

from __future__ import annotations

import array
import random
from pathlib import Path

import pytest

import leafid

KEY = bytes(range(16))


@pytest.fixture(scope="module")
def cipher() -> leafid.IdCipher:
    return leafid.IdCipher(KEY)


def test_round_trips_and_no_collisions_over_a_million_ids(cipher: leafid.IdCipher) -> None:
    ids = list(range(1, 1_000_001))
    enc = cipher.encrypt_many(ids)
    assert len(set(enc)) == len(ids)
    assert all(0 < e <= 2**63 - 1 for e in enc)
    assert cipher.decrypt_many(enc) == ids


def test_single_calls_match_the_batch_forms(cipher: leafid.IdCipher) -> None:
    rng = random.Random(15)
    ids = [rng.randrange(1, 2**63) for _ in range(2000)] + [1, 2**63 - 1]
    enc = [cipher.encrypt(i) for i in ids]
    assert enc == cipher.encrypt_many(ids)
    assert [cipher.decrypt(e) for e in enc] == ids
    assert cipher.encrypt_many(array.array("q", ids[:10])) == enc[:10]


def test_ciphertexts_match_rust_and_node_for_the_same_key() -> None:
    # core/tests/cipher.rs and tests/node/cipher.test.js pin the same values.
    a, b = leafid.IdCipher(KEY), leafid.IdCipher(KEY)
    assert a.encrypt(12345) == 3911038333464591060
    assert a.encrypt(1) == 3373251355954433687
    assert a.encrypt(12345) == b.encrypt(12345)
    assert leafid.IdCipher(bytes(16)).encrypt(12345) != a.encrypt(12345)


@pytest.mark.parametrize("n", [0, 8, 15, 17, 31, 33])
def test_wrong_key_length_is_a_value_error(n: int) -> None:
    with pytest.raises(leafid.InvalidConfig, match=f"key is {n} bytes") as e:
        leafid.IdCipher(bytes(n))
    assert isinstance(e.value, ValueError)
    assert e.value.code == "LEAF_INVALID_CONFIG"


@pytest.mark.parametrize("n", [16, 24, 32])
def test_every_aes_key_length_works(n: int) -> None:
    c = leafid.IdCipher(bytes(n))
    assert c.decrypt(c.encrypt(99)) == 99
    assert f"AES-{n * 8}" in repr(c)


def test_key_must_be_bytes() -> None:
    with pytest.raises(TypeError):
        leafid.IdCipher("0123456789abcdef")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, -(2**63), 2**63, 2**64, 10**30])
def test_out_of_domain_ids_are_value_errors(cipher: leafid.IdCipher, bad: int) -> None:
    for op in (cipher.encrypt, cipher.decrypt):
        with pytest.raises(leafid.InvalidConfig) as e:
            op(bad)
        assert isinstance(e.value, ValueError)
    with pytest.raises(ValueError):
        cipher.encrypt_many([1, 2, bad])
    with pytest.raises(ValueError):
        cipher.decrypt_many([bad])


@pytest.mark.parametrize("bad", ["1", 1.0, None, b"1"])
def test_non_int_ids_are_type_errors(cipher: leafid.IdCipher, bad: object) -> None:
    with pytest.raises(TypeError):
        cipher.encrypt(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cipher.encrypt_many([1, bad])  # type: ignore[list-item]


def test_base62_fixed_width_round_trip_and_order() -> None:
    assert leafid.encode_base62(0) == "00000000000"
    assert leafid.encode_base62(2**63 - 1) == "AzL8n0Y58m7"
    rng = random.Random(62)
    ids = [rng.randrange(0, 2**63) for _ in range(20_000)] + [0, 1, 61, 62, 2**63 - 1]
    encoded = [leafid.encode_base62(i) for i in ids]
    assert all(len(s) == 11 for s in encoded)
    assert [leafid.decode_base62(s) for s in encoded] == ids
    assert sorted(encoded) == [leafid.encode_base62(i) for i in sorted(ids)]


@pytest.mark.parametrize(
    "bad, what",
    [
        ("", "0 bytes"),
        ("0000000000", "10 bytes"),
        ("000000000000", "12 bytes"),
        ("0000000000-", "position 10"),
        ("0000000000 ", "position 10"),
        ("AzL8n0Y58m8", "past the largest id"),
        ("zzzzzzzzzzz", "past the largest id"),
    ],
)
def test_malformed_base62_is_a_value_error(bad: str, what: str) -> None:
    with pytest.raises(leafid.InvalidConfig, match=what) as e:
        leafid.decode_base62(bad)
    assert isinstance(e.value, ValueError)


def test_base62_refuses_negative_and_oversized_ids() -> None:
    for bad in (-1, 2**63):
        with pytest.raises(leafid.InvalidConfig):
            leafid.encode_base62(bad)
    with pytest.raises(TypeError):
        leafid.decode_base62(5)  # type: ignore[arg-type]


def test_js_safe_layout_preset() -> None:
    layout = leafid.Layout.js_safe()
    assert (layout.timestamp_bits, layout.worker_bits, layout.sequence_bits) == (41, 3, 9)
    assert layout.max_id == 2**53 - 1
    assert layout.max_worker_id == 7
    assert layout == leafid.Layout(41, 3, 9)
    with pytest.raises(leafid.InvalidConfig, match="sum to 63"):
        leafid.Layout(41, 3, 8)


def test_js_safe_snowflake_ids_stay_below_2_pow_53(tmp_path: Path) -> None:
    with leafid.SnowflakeGenerator(
        registry="fixed:7", layout=leafid.Layout.js_safe(), cache_dir=str(tmp_path)
    ) as gen:
        ids = gen.next_ids(5000)
    assert len(set(ids)) == 5000
    assert all(0 < i < 2**53 for i in ids)
    assert leafid.decode(ids[0], leafid.Layout.js_safe()).worker_id == 7
