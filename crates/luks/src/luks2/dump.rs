//! `luksDump`-style text for LUKS2 (layout of cryptsetup 2.6 `LUKS2_hdr_dump`).

use super::json::{Keyslot, Kdf, SegmentSize};
use super::Luks2;
use crate::util::hex_lines;

/// Text close to `cryptsetup luksDump` for a LUKS2 header.
pub fn text(l: &Luks2) -> String {
    let m = &l.meta;
    let mut s = String::new();
    s.push_str("LUKS header information\n");
    s.push_str("Version:       \t2\n");
    s.push_str(&format!("Epoch:         \t{}\n", l.seqid));
    s.push_str(&format!("Metadata area: \t{} [bytes]\n", l.hdr_size));
    s.push_str(&format!("Keyslots area: \t{} [bytes]\n", m.config.keyslots_size.0));
    s.push_str(&format!("UUID:          \t{}\n", l.uuid));
    let or = |v: &str, none: &str| if v.is_empty() { none.to_string() } else { v.to_string() };
    s.push_str(&format!("Label:         \t{}\n", or(&l.label, "(no label)")));
    s.push_str(&format!("Subsystem:     \t{}\n", or(&l.subsystem, "(no subsystem)")));
    let flags = super::config::flags(m);
    s.push_str(&format!(
        "Flags:       \t{}\n",
        if flags.is_empty() { "(no flags)".to_string() } else { flags.join(" ") }
    ));
    let reqs = super::config::mandatory(m);
    if !reqs.is_empty() {
        s.push_str(&format!("Requirements:\t{}\n", reqs.join(" ")));
    }
    s.push_str("\nData segments:\n");
    for (id, seg) in &m.segments {
        s.push_str(&format!("  {id}: {}\n", seg.kind));
        s.push_str(&format!("\toffset: {} [bytes]\n", seg.offset.0));
        match seg.size {
            SegmentSize::Dynamic => s.push_str("\tlength: (whole device)\n"),
            SegmentSize::Bytes(n) => s.push_str(&format!("\tlength: {n} [bytes]\n")),
        }
        if let Some(e) = &seg.encryption {
            s.push_str(&format!("\tcipher: {e}\n"));
        }
        if let Some(ss) = seg.sector_size {
            s.push_str(&format!("\tsector: {ss} [bytes]\n"));
        }
        if let Some(i) = &seg.integrity {
            let t = i.get("type").and_then(|v| v.as_str()).unwrap_or("?");
            s.push_str(&format!("\tintegrity: {t}\n"));
        }
        if let Some(f) = &seg.flags {
            s.push_str(&format!("\tflags : {}\n", f.join(" ")));
        }
    }
    s.push_str("\nKeyslots:\n");
    for (id, ks) in &m.keyslots {
        s.push_str(&format!("  {id}: {}\n", ks.kind()));
        if let Keyslot::Luks2(k) = ks {
            s.push_str(&format!("\tKey:        {} bits\n", k.key_size * 8));
            let pr = match k.priority.unwrap_or(1) {
                0 => "ignored",
                1 => "normal",
                2 => "preferred",
                _ => "invalid",
            };
            s.push_str(&format!("\tPriority:   {pr}\n"));
            s.push_str(&format!("\tCipher:     {}\n", k.area.encryption));
            s.push_str(&format!("\tCipher key: {} bits\n", k.area.key_size * 8));
            match &k.kdf {
                Kdf::Pbkdf2 { hash, iterations, .. } => {
                    s.push_str("\tPBKDF:      pbkdf2\n");
                    s.push_str(&format!("\tHash:       {hash}\n"));
                    s.push_str(&format!("\tIterations: {iterations}\n"));
                }
                Kdf::Argon2i { time, memory, cpus, .. } | Kdf::Argon2id { time, memory, cpus, .. } => {
                    let name = if matches!(k.kdf, Kdf::Argon2i { .. }) { "argon2i" } else { "argon2id" };
                    s.push_str(&format!("\tPBKDF:      {name}\n"));
                    s.push_str(&format!("\tTime cost:  {time}\n"));
                    s.push_str(&format!("\tMemory:     {memory}\n"));
                    s.push_str(&format!("\tThreads:    {cpus}\n"));
                }
            }
            s.push_str(&format!("\tSalt:       {}\n", hex_lines(k.kdf.salt(), 16, "\t            ")));
            s.push_str(&format!("\tAF stripes: {}\n", k.af.stripes));
            s.push_str(&format!("\tAF hash:    {}\n", k.af.hash));
            s.push_str(&format!("\tArea offset:{} [bytes]\n", k.area.offset.0));
            s.push_str(&format!("\tArea length:{} [bytes]\n", k.area.size.0));
        }
        if let Some(d) = l.keyslot_digest_id(*id) {
            s.push_str(&format!("\tDigest ID:  {d}\n"));
        }
    }
    s.push_str("Tokens:\n");
    for (id, t) in &m.tokens {
        let ty = t.get("type").and_then(|v| v.as_str()).unwrap_or("?");
        s.push_str(&format!("  {id}: {ty}\n"));
        if let Some(arr) = t.get("keyslots").and_then(|v| v.as_array()) {
            for k in arr {
                s.push_str(&format!("\tKeyslot:    {}\n", k.as_str().unwrap_or("?")));
            }
        }
    }
    s.push_str("Digests:\n");
    for (id, d) in &m.digests {
        s.push_str(&format!("  {id}: {}\n", d.kind));
        s.push_str(&format!("\tHash:       {}\n", d.hash));
        s.push_str(&format!("\tIterations: {}\n", d.iterations));
        s.push_str(&format!("\tSalt:       {}\n", hex_lines(&d.salt.0, 16, "\t            ")));
        s.push_str(&format!("\tDigest:     {}\n", hex_lines(&d.digest.0, 16, "\t            ")));
    }
    s
}
