//! `luksDump`-style text and a JSON rendering of a LUKS1 header (layout of
//! cryptsetup 2.6 `LUKS1 dump`).

use super::header::Phdr;
use crate::util::{hex, hex_lines};

/// Text close to `cryptsetup luksDump` for a LUKS1 header.
pub fn text(h: &Phdr) -> String {
    let mut s = String::new();
    s.push_str("LUKS header information\n\n");
    s.push_str("Version:       \t1\n");
    s.push_str(&format!("Cipher name:   \t{}\n", h.cipher_name));
    s.push_str(&format!("Cipher mode:   \t{}\n", h.cipher_mode));
    s.push_str(&format!("Hash spec:     \t{}\n", h.hash_spec));
    s.push_str(&format!("Payload offset:\t{}\n", h.payload_offset));
    s.push_str(&format!("MK bits:       \t{}\n", h.key_bytes * 8));
    s.push_str(&format!(
        "MK digest:     \t{}\n",
        hex_lines(&h.mk_digest, 20, "")
    ));
    s.push_str(&format!(
        "MK salt:       \t{}\n",
        hex_lines(&h.mk_digest_salt, 16, "               \t")
    ));
    s.push_str(&format!("MK iterations: \t{}\n", h.mk_digest_iter));
    s.push_str(&format!("UUID:          \t{}\n\n", h.uuid));
    for (i, k) in h.keyslots.iter().enumerate() {
        if k.is_active() {
            s.push_str(&format!("Key Slot {i}: ENABLED\n"));
            s.push_str(&format!("\tIterations:         \t{}\n", k.iterations));
            s.push_str(&format!(
                "\tSalt:               \t{}\n",
                hex_lines(&k.salt, 16, "\t                      \t")
            ));
            s.push_str(&format!(
                "\tKey material offset:\t{}\n",
                k.key_material_offset
            ));
            s.push_str(&format!("\tAF stripes:            \t{}\n", k.stripes));
        } else {
            s.push_str(&format!("Key Slot {i}: DISABLED\n"));
        }
    }
    s
}

/// A JSON object with every header field (binary values in hex).
pub fn json(h: &Phdr) -> serde_json::Value {
    let slots: Vec<serde_json::Value> = h
        .keyslots
        .iter()
        .enumerate()
        .map(|(i, k)| {
            serde_json::json!({
                "slot": i,
                "active": k.is_active(),
                "iterations": k.iterations,
                "salt": hex(&k.salt),
                "key_material_offset": k.key_material_offset,
                "stripes": k.stripes,
            })
        })
        .collect();
    serde_json::json!({
        "version": 1,
        "cipher_name": h.cipher_name,
        "cipher_mode": h.cipher_mode,
        "hash_spec": h.hash_spec,
        "payload_offset": h.payload_offset,
        "key_bytes": h.key_bytes,
        "mk_digest": hex(&h.mk_digest),
        "mk_digest_salt": hex(&h.mk_digest_salt),
        "mk_digest_iter": h.mk_digest_iter,
        "uuid": h.uuid,
        "keyslots": slots,
    })
}
