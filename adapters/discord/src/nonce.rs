//! The `nonce` a create-message request carries, so that Discord itself deduplicates a send
//! whose outcome was unknown (`SendReconciliation::PlatformDeduplicates`).
//!
//! With `enforce_nonce: true`, Discord answers a create whose nonce repeats one the same
//! author used in the same channel within the last few minutes with the message it already
//! created, instead of creating a second one (API docs, "Create Message"). The core's
//! idempotency key is stable across retries and restarts but may be ~100 characters of any
//! printable ASCII, while a nonce is at most 25 characters. So the nonce is a hash of the key:
//! FNV-1a, 128 bits, written in base 36 — never more than 25 characters (36^25 > 2^128), the
//! same in every process and on every Rust version (unlike std's `DefaultHasher`), and wide
//! enough that two keys of one channel colliding within Discord's window is not a concern.

/// Discord's limit on a message nonce (API docs, "Create Message": up to 25 characters).
pub(crate) const NONCE_LIMIT: usize = 25;

/// FNV-1a 128-bit offset basis (the FNV specification, draft-eastlake-fnv).
const FNV_OFFSET_BASIS: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
/// FNV 128-bit prime, 2^88 + 2^8 + 0x3b.
const FNV_PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

/// The nonce for a message with this idempotency key: deterministic, at most
/// [`NONCE_LIMIT`] characters of `[0-9a-z]`.
pub(crate) fn nonce_for(idempotency_key: &str) -> String {
    base36(fnv1a_128(idempotency_key.as_bytes()))
}

fn fnv1a_128(bytes: &[u8]) -> u128 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, byte| (hash ^ u128::from(*byte)).wrapping_mul(FNV_PRIME))
}

fn base36(mut value: u128) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::with_capacity(NONCE_LIMIT);
    loop {
        out.push(DIGITS[(value % 36) as usize]);
        value /= 36;
        if value == 0 {
            break;
        }
    }
    out.reverse();
    // Only ASCII digits and letters were pushed.
    out.into_iter().map(char::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_128_matches_the_reference_vectors() {
        assert_eq!(fnv1a_128(b""), FNV_OFFSET_BASIS);
        assert_eq!(fnv1a_128(b"a"), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
    }

    #[test]
    fn a_key_always_maps_to_the_same_nonce() {
        // Pinned: a nonce sent before a restart must be recomputed identically after it.
        assert_eq!(nonce_for("d42:3"), "11cy3vuvcegwwxi6kluj2oq82");
        assert_eq!(nonce_for("d42:preview"), "8nvemu0o6p296989at3aih3hz");
        assert_eq!(nonce_for("d42:3:plain"), "16dl3lyr8ib6ez86ka6yz7ddg");
    }

    #[test]
    fn every_nonce_fits_discords_limit_and_distinct_keys_differ() {
        assert_eq!(base36(u128::MAX).len(), NONCE_LIMIT);
        assert_eq!(base36(0), "0");
        let long = "k".repeat(100);
        let keys = ["d1:0", "d1:1", "d2:0", "d1:preview", long.as_str(), "~!@#$%^&*()_+ \"'"];
        let nonces: std::collections::HashSet<String> = keys.iter().map(|key| nonce_for(key)).collect();
        assert_eq!(nonces.len(), keys.len());
        assert!(
            nonces.iter().all(|nonce| nonce.len() <= NONCE_LIMIT && nonce.bytes().all(|b| b.is_ascii_alphanumeric()))
        );
    }
}
