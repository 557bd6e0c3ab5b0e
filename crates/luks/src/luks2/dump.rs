//! `luksDump`-style text for LUKS2 (layout of cryptsetup 2.6 `LUKS2_hdr_dump`).

use serde_json::{Map, Value};

use super::json::{Kdf, Keyslot, SegmentSize};
use super::Luks2;
use crate::util::hex_lines;

/// Text close to `cryptsetup luksDump` for a LUKS2 header.
pub fn text(l: &Luks2) -> String {
    let mut s = String::new();
    header(&mut s, l);
    segments(&mut s, l);
    keyslots(&mut s, l);
    tokens(&mut s, l);
    digests(&mut s, l);
    s
}

fn header(s: &mut String, l: &Luks2) {
    let m = &l.meta;
    s.push_str("LUKS header information\n");
    s.push_str("Version:       \t2\n");
    s.push_str(&format!("Epoch:         \t{}\n", l.seqid));
    s.push_str(&format!("Metadata area: \t{} [bytes]\n", l.hdr_size));
    s.push_str(&format!(
        "Keyslots area: \t{} [bytes]\n",
        m.config.keyslots_size.0
    ));
    s.push_str(&format!("UUID:          \t{}\n", l.uuid));
    let or = |v: &str, none: &str| {
        if v.is_empty() {
            none.to_string()
        } else {
            v.to_string()
        }
    };
    s.push_str(&format!(
        "Label:         \t{}\n",
        or(&l.label, "(no label)")
    ));
    s.push_str(&format!(
        "Subsystem:     \t{}\n",
        or(&l.subsystem, "(no subsystem)")
    ));
    // cryptsetup prints each flag and requirement followed by a space.
    let flags = super::config::flags(m);
    s.push_str("Flags:       \t");
    if flags.is_empty() {
        s.push_str("(no flags)");
    }
    for f in &flags {
        s.push_str(&format!("{f} "));
    }
    s.push('\n');
    let reqs = super::config::mandatory(m);
    if !reqs.is_empty() {
        s.push_str("Requirements:\t");
        for r in &reqs {
            s.push_str(&format!("{r} "));
        }
        s.push('\n');
    }
    s.push('\n');
}

fn segments(s: &mut String, l: &Luks2) {
    s.push_str("Data segments:\n");
    for (id, seg) in &l.meta.segments {
        s.push_str(&format!("  {id}: {}\n", seg.kind));
        s.push_str(&format!("\toffset: {} [bytes]\n", seg.offset.0));
        match seg.size {
            SegmentSize::Dynamic => s.push_str("\tlength: (whole device)\n"),
            SegmentSize::Bytes(n) => s.push_str(&format!("\tlength: {n} [bytes]\n")),
        }
        match &seg.encryption {
            Some(e) => s.push_str(&format!("\tcipher: {e}\n")),
            None => s.push_str("\tcipher: (no SW encryption)\n"),
        }
        if let Some(ss) = seg.sector_size {
            s.push_str(&format!("\tsector: {ss} [bytes]\n"));
        }
        if let Some(i) = &seg.integrity {
            // cryptsetup 2.8 and later also print `integrity.key_size`
            // ("integrity key size: N [bits]"); 2.6 does not.
            s.push_str(&format!("\tintegrity: {}\n", i.kind));
        }
        if let Some(f) = seg.flags.as_ref().filter(|f| !f.is_empty()) {
            s.push_str(&format!("\tflags : {}\n", f.join(", ")));
        }
        s.push('\n');
    }
}

fn keyslots(s: &mut String, l: &Luks2) {
    s.push_str("Keyslots:\n");
    for (id, ks) in &l.meta.keyslots {
        let unbound = if bound(l, *id) { "" } else { " (unbound)" };
        s.push_str(&format!("  {id}: {}{unbound}\n", ks.kind()));
        let (key_size, priority) = match ks {
            Keyslot::Luks2(k) => (Some(u64::from(k.key_size)), k.priority.map(u64::from)),
            Keyslot::Other(o) => (
                o.get("key_size").and_then(Value::as_u64),
                o.get("priority").and_then(Value::as_u64),
            ),
        };
        if let Some(k) = key_size {
            s.push_str(&format!("\tKey:        {} bits\n", k * 8));
        }
        let pr = match priority.unwrap_or(1) {
            0 => "ignored",
            1 => "normal",
            2 => "preferred",
            _ => "invalid",
        };
        s.push_str(&format!("\tPriority:   {pr}\n"));
        match ks {
            Keyslot::Luks2(k) => {
                s.push_str(&format!("\tCipher:     {}\n", k.area.encryption));
                s.push_str(&format!("\tCipher key: {} bits\n", k.area.key_size * 8));
                match &k.kdf {
                    Kdf::Pbkdf2 {
                        hash, iterations, ..
                    } => {
                        s.push_str("\tPBKDF:      pbkdf2\n");
                        s.push_str(&format!("\tHash:       {hash}\n"));
                        s.push_str(&format!("\tIterations: {iterations}\n"));
                    }
                    Kdf::Argon2i {
                        time, memory, cpus, ..
                    }
                    | Kdf::Argon2id {
                        time, memory, cpus, ..
                    } => {
                        let name = if matches!(k.kdf, Kdf::Argon2i { .. }) {
                            "argon2i"
                        } else {
                            "argon2id"
                        };
                        s.push_str(&format!("\tPBKDF:      {name}\n"));
                        s.push_str(&format!("\tTime cost:  {time}\n"));
                        s.push_str(&format!("\tMemory:     {memory}\n"));
                        s.push_str(&format!("\tThreads:    {cpus}\n"));
                    }
                }
                s.push_str(&format!(
                    "\tSalt:       {}\n",
                    hex_lines(k.kdf.salt(), 16, "\t            ")
                ));
                s.push_str(&format!("\tAF stripes: {}\n", k.af.stripes));
                s.push_str(&format!("\tAF hash:    {}\n", k.af.hash));
                s.push_str(&format!("\tArea offset:{} [bytes]\n", k.area.offset.0));
                s.push_str(&format!("\tArea length:{} [bytes]\n", k.area.size.0));
            }
            Keyslot::Other(o) => other_keyslot(s, o),
        }
        if let Some(d) = l.keyslot_digest_id(*id) {
            s.push_str(&format!("\tDigest ID:  {d}\n"));
        }
    }
}

fn tokens(s: &mut String, l: &Luks2) {
    s.push_str("Tokens:\n");
    for (id, t) in &l.meta.tokens {
        let ty = t.get("type").and_then(Value::as_str).unwrap_or("?");
        s.push_str(&format!("  {id}: {ty}\n"));
        if let Some(arr) = t.get("keyslots").and_then(Value::as_array) {
            for k in arr {
                s.push_str(&format!("\tKeyslot:    {}\n", k.as_str().unwrap_or("?")));
            }
        }
    }
}

fn digests(s: &mut String, l: &Luks2) {
    s.push_str("Digests:\n");
    for (id, d) in &l.meta.digests {
        s.push_str(&format!("  {id}: {}\n", d.kind));
        s.push_str(&format!("\tHash:       {}\n", d.hash));
        s.push_str(&format!("\tIterations: {}\n", d.iterations));
        s.push_str(&format!(
            "\tSalt:       {}\n",
            hex_lines(&d.salt.0, 16, "\t            ")
        ));
        s.push_str(&format!(
            "\tDigest:     {}\n",
            hex_lines(&d.digest.0, 16, "\t            ")
        ));
    }
}

/// Whether keyslot `id` is bound (through a digest) to a non-backup segment;
/// cryptsetup prints "(unbound)" otherwise.
fn bound(l: &Luks2, id: u32) -> bool {
    let sid = id.to_string();
    let live = |seg: &String| {
        seg.parse::<u32>()
            .ok()
            .and_then(|n| l.meta.segments.get(&n))
            .is_some_and(|sg| {
                !sg.flags
                    .as_ref()
                    .is_some_and(|f| f.iter().any(|x| x.starts_with("backup-")))
            })
    };
    l.meta
        .digests
        .values()
        .any(|d| d.keyslots.contains(&sid) && d.segments.iter().any(live))
}

/// The fields cryptsetup shows for a `reencrypt` keyslot.
fn other_keyslot(s: &mut String, o: &Map<String, Value>) {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    let area = o.get("area").and_then(Value::as_object);
    let field = |name: &str| area.and_then(|a| a.get(name));
    if o.get("type").and_then(Value::as_str) == Some("reencrypt") {
        let res = text(field("type"));
        s.push_str(&format!("\t{:<12}{}\n", "Mode:", text(o.get("mode"))));
        s.push_str(&format!(
            "\t{:<12}{}\n",
            "Direction:",
            text(o.get("direction"))
        ));
        s.push_str(&format!("\t{:<12}{res}\n", "Resilience:"));
        if res == "checksum" {
            s.push_str(&format!("\t{:<12}{}\n", "Hash:", text(field("hash"))));
            let ss = field("sector_size").and_then(Value::as_u64).unwrap_or(0);
            s.push_str(&format!("\t{:<12}{ss} [bytes]\n", "Hash data:"));
        } else if res == "datashift" {
            s.push_str(&format!(
                "\t{:<12}{}[bytes]\n",
                "Shift size:",
                text(field("shift_size"))
            ));
        }
    }
    if area.is_some() {
        s.push_str(&format!(
            "\tArea offset:{} [bytes]\n",
            text(field("offset"))
        ));
        s.push_str(&format!("\tArea length:{} [bytes]\n", text(field("size"))));
    }
}
