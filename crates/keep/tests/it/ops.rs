//! The keep's operations against known answers and against OpenSSL's
//! command line as the oracle.

use std::io::Write;
use std::process::{Command, Stdio};

use cryptkeep_keep::ops::dispatch::Ops;
use cryptkeep_keep::ops::gcm::Gcm;
use cryptkeep_keep::ops::rsa::{encrypt_oaep_sha256, verify_pss_sha256, RsaKeyPair};
use cryptkeep_keep::ops::seal::SealKey;
use cryptkeep_keep::ops::sha256;
use cryptkeep_keep::proto::*;
use cryptkeep_testkit::need;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn sha256_fips_180_2_vectors() {
    assert_eq!(
        hex(&sha256(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        hex(&sha256(&vec![b'a'; 1_000_000])),
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
    );
}

#[test]
fn gcm_test_case_16() {
    // McGrew & Viega, "The Galois/Counter Mode of Operation", test case 16.
    let key: [u8; 32] = unhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
        .try_into()
        .unwrap();
    let iv: [u8; 12] = unhex("cafebabefacedbaddecaf888").try_into().unwrap();
    let pt = unhex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39");
    let aad = unhex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
    let ct = "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662";
    let tag = "76fc6ece0f4e1768cddf8853bb2d551b";
    let g = Gcm::new(&key);
    let mut buf = vec![0u8; pt.len() + 28];
    buf[..pt.len()].copy_from_slice(&pt);
    let n = g
        .encrypt_with_nonce_in_place(&iv, &mut buf, pt.len(), &aad)
        .unwrap();
    assert_eq!(hex(&buf[..12]), hex(&iv));
    assert_eq!(hex(&buf[12..n - 16]), ct);
    assert_eq!(hex(&buf[n - 16..n]), tag);
    let m = g.decrypt_in_place(&mut buf, n, &aad).unwrap();
    assert_eq!(&buf[..m], &pt[..]);
    let mut bad = g.encrypt(b"x", b"").unwrap();
    bad[5] ^= 1;
    assert!(g.decrypt(&bad, b"").is_err());
}

#[test]
fn seal_binds_key_and_content() {
    let a = SealKey::random();
    let blob = a.seal(b"secret").unwrap();
    assert_eq!(&blob[..4], b"CKS1");
    assert_eq!(a.unseal(&blob).unwrap(), b"secret");
    assert!(SealKey::random().unseal(&blob).is_err());
    for i in 0..blob.len() {
        let mut b = blob.clone();
        b[i] ^= 0x80;
        assert!(a.unseal(&b).is_err(), "flipped byte {i} accepted");
    }
    for n in 0..blob.len() {
        assert!(a.unseal(&blob[..n]).is_err());
    }
}

fn openssl(args: &[&str], input: &[u8]) -> (bool, Vec<u8>, String) {
    let mut c = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl");
    c.stdin.take().unwrap().write_all(input).unwrap();
    let o = c.wait_with_output().unwrap();
    (
        o.status.success(),
        o.stdout,
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[test]
fn rsa_agrees_with_openssl() {
    need!(tool "openssl");
    let dir = std::env::temp_dir().join(format!("ck-rsa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let k = RsaKeyPair::generate_2048().unwrap();
    let der = k.public_key_der();
    let pubf = dir.join("pub.der");
    std::fs::write(&pubf, &der).unwrap();
    let p = pubf.to_str().unwrap();
    let (ok, out, err) = openssl(
        &[
            "pkey", "-pubin", "-inform", "DER", "-in", p, "-text", "-noout",
        ],
        b"",
    );
    assert!(ok, "{err}");
    assert!(String::from_utf8_lossy(&out).contains("Public-Key: (2048 bit)"));

    // Our PSS signature verifies in OpenSSL.
    let msg = b"signed inside the keep";
    let sig = k.sign_pss_sha256(msg).unwrap();
    let sigf = dir.join("sig");
    std::fs::write(&sigf, &sig).unwrap();
    let verify = |m: &[u8]| {
        openssl(
            &[
                "dgst",
                "-sha256",
                "-sigopt",
                "rsa_padding_mode:pss",
                "-sigopt",
                "rsa_pss_saltlen:32",
                "-keyform",
                "DER",
                "-verify",
                p,
                "-signature",
                sigf.to_str().unwrap(),
            ],
            m,
        )
        .0
    };
    assert!(verify(msg));
    assert!(!verify(b"another message"));
    assert!(verify_pss_sha256(&der, msg, &sig).unwrap());
    assert!(!verify_pss_sha256(&der, b"other", &sig).unwrap());

    // OpenSSL's OAEP-SHA-256 encryption opens with our key, and ours with the same padding checks out.
    let (ok, ct, err) = openssl(
        &[
            "pkeyutl",
            "-encrypt",
            "-pubin",
            "-keyform",
            "DER",
            "-inkey",
            p,
            "-pkeyopt",
            "rsa_padding_mode:oaep",
            "-pkeyopt",
            "rsa_oaep_md:sha256",
            "-pkeyopt",
            "rsa_mgf1_md:sha256",
        ],
        b"from openssl",
    );
    assert!(ok, "{err}");
    assert_eq!(k.decrypt_oaep_sha256(&ct).unwrap(), b"from openssl");
    let ours = encrypt_oaep_sha256(&der, b"to ourselves").unwrap();
    assert_eq!(ours.len(), 256);
    assert_eq!(k.decrypt_oaep_sha256(&ours).unwrap(), b"to ourselves");
    assert!(k.decrypt_oaep_sha256(&ours[1..]).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ops_answer_in_place_and_refuse_bad_input() {
    let ops = Ops::new(SealKey::random());
    let mut buf = vec![0u8; 4096];
    buf[..3].copy_from_slice(b"abc");
    assert_eq!(ops.handle(OP_SHA256, &mut buf, 3), Ok(32));
    assert_eq!(&buf[..32], &sha256(b"abc"));
    assert_eq!(ops.handle(OP_SHA256, &mut [0u8; 16], 3), Err(STATUS_FAILED));
    assert_eq!(ops.handle(9999, &mut buf, 0), Err(STATUS_UNSUPPORTED));
    assert_eq!(
        ops.handle(OP_SHA256, &mut [0u8; 8], 9),
        Err(STATUS_BAD_DESCRIPTOR)
    );
    // Seal / unseal / GCM in place, and too-small buffers.
    buf[..5].copy_from_slice(b"hello");
    let n = ops.handle(OP_SEAL, &mut buf, 5).unwrap();
    assert_eq!(ops.handle(OP_UNSEAL, &mut buf, n), Ok(5));
    assert_eq!(&buf[..5], b"hello");
    assert_eq!(ops.handle(OP_SEAL, &mut [0u8; 20], 5), Err(STATUS_FAILED));
    assert_eq!(ops.handle(OP_UNSEAL, &mut buf, 7), Err(STATUS_FAILED));
    let n = ops.handle(OP_GCM_ENCRYPT, &mut buf, 5).unwrap();
    assert_eq!(ops.handle(OP_GCM_DECRYPT, &mut buf, n), Ok(5));
    // RSA before a key exists, then after.
    assert_eq!(ops.handle(OP_RSA_SIGN, &mut buf, 5), Err(STATUS_FAILED));
    assert_eq!(
        ops.handle(OP_RSA_DECRYPT, &mut buf, 256),
        Err(STATUS_FAILED)
    );
    let n = ops.handle(OP_RSA_GENERATE, &mut buf, 0).unwrap();
    let der = buf[..n].to_vec();
    buf[..3].copy_from_slice(b"msg");
    let n = ops.handle(OP_RSA_SIGN, &mut buf, 3).unwrap();
    assert!(verify_pss_sha256(&der, b"msg", &buf[..n]).unwrap());
    buf[..3].copy_from_slice(b"abc");
    let n = ops.handle(OP_RSA_ENCRYPT, &mut buf, 3).unwrap();
    assert_eq!(ops.handle(OP_RSA_DECRYPT, &mut buf, n), Ok(3));
    assert_eq!(&buf[..3], b"abc");
    assert_eq!(
        ops.handle(OP_RSA_DECRYPT, &mut buf, 100),
        Err(STATUS_FAILED)
    );
    assert_eq!(
        ops.handle(OP_RSA_GENERATE, &mut [0u8; 10], 0),
        Err(STATUS_FAILED)
    );
}

#[test]
fn the_runtime_greeting_is_a_constant_and_needs_room() {
    use cryptkeep_keep::server::RuntimeHandler;
    use cryptkeep_keep::shm::Handler;
    let h = RuntimeHandler::new(Ops::new(SealKey::random()));
    // Whatever the input, the answer is the greeting, and nothing more.
    let mut buf = [0xa5u8; 64];
    let n = h.handle(OP_HELLO, 7, &mut buf, 64).unwrap();
    assert_eq!(&buf[..n], HELLO_GREETING);
    assert!(buf[n..].iter().all(|&b| b == 0xa5));
    // A buffer too small for it is a failure, not a short answer.
    let mut small = vec![0u8; HELLO_GREETING.len() - 1];
    assert_eq!(h.handle(OP_HELLO, 0, &mut small, 0), Err(STATUS_FAILED));
    // An input longer than the buffer is a bad descriptor, as everywhere.
    assert_eq!(
        h.handle(OP_HELLO, 0, &mut buf, 65),
        Err(STATUS_BAD_DESCRIPTOR)
    );
    // The volume and overlay keeps do not answer it.
    assert!(!VOLUME_OPS.contains(&OP_HELLO));
    assert!(!AUTH_VOLUME_OPS.contains(&OP_HELLO));
    assert!(!OVERLAY_OPS.contains(&OP_HELLO));
}
