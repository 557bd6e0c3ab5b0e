import re, subprocess, hashlib, sys  # usage: gen_ciphers_pbkdf2.py PATH/TO/botan/xts.vec
out_dir=__import__('os').path.join(__import__('os').path.dirname(__import__('os').path.abspath(__file__)), '..')
def xts_ref(key, nonce, data):
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    e=Cipher(algorithms.AES(key), modes.XTS(nonce)).encryptor()
    return e.update(data)+e.finalize()
def openssl_enc(cipher, key, iv, data, dec=False):
    args=['openssl','enc','-'+cipher,'-K',key.hex(),'-nopad']+(['-iv',iv.hex()] if iv is not None else [])+(['-d'] if dec else [])
    return subprocess.run(args,input=data,capture_output=True,check=True).stdout

# ---- XTS from Botan's copy of IEEE 1619-2007 Annex B
txt=open(__import__('sys').argv[1]).read()
sections=re.split(r'^\[(.*)\]\s*$',txt,flags=re.M)
vecs=[]
for i in range(1,len(sections),2):
    name=sections[i]
    if name not in ('AES-128/XTS','AES-256/XTS'): continue
    body=sections[i+1]
    label=None; cur={}
    for line in body.splitlines():
        m=re.match(r'# IEEE 1619-2007 VECTOR (\d+)',line)
        if m: label=int(m.group(1)); continue
        if line.startswith('#'): label=None; continue
        m=re.match(r'(\w+) = (.*)',line)
        if m:
            cur[m.group(1)]=m.group(2).strip()
            if m.group(1)=='Out':
                if label is not None: vecs.append((label,cur))
                cur={}
seen=set(); lines=['# IEEE Std 1619-2007 Annex B XTS-AES test vectors whose data units are whole',
 '# 16-byte blocks (as taken from Botan src/tests/data/modes/xts.vec, and each',
 '# re-checked against the OpenSSL XTS in pyca/cryptography when this file was made,',
 '# except vector 1, whose equal key halves OpenSSL refuses).',
 '# Key = Key1 || Key2. DataUnit = data unit sequence number, which is the',
 '# dm-crypt plain64 sector number (IV = le64(DataUnit) || zeros).','']
for label,v in vecs:
    key=bytes.fromhex(v['Key']); nonce=bytes.fromhex(v['Nonce']); pt=bytes.fromhex(v['In']); ct=bytes.fromhex(v['Out'])
    if len(pt)%16 or (label,len(key)) in seen: continue
    assert nonce[8:]==bytes(8)
    seen.add((label,len(key)))
    seq=int.from_bytes(nonce[:8],'little')
    c='aes-128-xts' if len(key)==32 else 'aes-256-xts'
    if key[:len(key)//2]!=key[len(key)//2:]:
        assert xts_ref(key,nonce,pt)==ct, label
    lines+=[f'Vector = {label}',f'Key = {key.hex()}',f'DataUnit = {seq}',f'PT = {pt.hex()}',f'CT = {ct.hex()}','']
open(f'{out_dir}/xts_aes_ieee1619.txt','w').write('\n'.join(lines))
print('xts vectors', sorted(seen))

# ---- SP 800-38A CBC and ECB
P='6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e5130c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710'
K={128:'2b7e151628aed2a6abf7158809cf4f3c',192:'8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b',256:'603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4'}
CBC={128:'7649abac8119b246cee98e9b12e9197d5086cb9b507219ee95db113a917678b273bed6b8e3c1743b7116e69e222295163ff1caa1681fac09120eca307586e1a7',
     192:'4f021db243bc633d7178183a9fa071e8b4d9ada9ad7dedf4e5e738763f69145a571b242012fb7ae07fa9baac3df102e008b0e27988598881d920a9e64f5615cd',
     256:'f58c4c04d6e5f1ba779eabfb5f7bfbd69cfc4e967edb808d679f777bc6702c7d39f23369a9d9bacfa530e26304231461b2eb05e2c39be9fcda6c19078c6a9d1b'}
ECB={128:'3ad77bb40d7a3660a89ecaf32466ef97f5d3d58503b9699de785895a96fdbaaf43b1cd7f598ece23881b00e3ed0306887b0c785e27e8ad3f8223207104725dd4',
     192:'bd334f1d6e45f25ff712a214571fa5cc974104846d0ad3ad7734ecb3ecee4eefef7afd2270e2e60adce0ba2face6444e9a4b41ba738d6c72fb16691603c18e0e',
     256:'f3eed1bdb5d2a03c064b5a7e3db181f8591ccb10d410ed26dc5ba74a31362870b6ed21b99ca6f4f9f153e7b1beafed1d23304b7a39f9f3ff067d8d8f9e24ecc7'}
IV='000102030405060708090a0b0c0d0e0f'
lines=['# NIST SP 800-38A Appendix F.2.1, F.2.3, F.2.5 (CBC-AES128/192/256.Encrypt),','# re-checked against `openssl enc` when this file was made.','']
for b in (128,192,256):
    assert openssl_enc(f'aes-{b}-cbc',bytes.fromhex(K[b]),bytes.fromhex(IV),bytes.fromhex(P)).hex()==CBC[b]
    lines+=[f'Vector = CBC-AES{b}',f'Key = {K[b]}',f'IV = {IV}',f'PT = {P}',f'CT = {CBC[b]}','']
open(f'{out_dir}/cbc_aes_sp800_38a.txt','w').write('\n'.join(lines))
lines=['# NIST SP 800-38A Appendix F.1.1, F.1.3, F.1.5 (ECB-AES128/192/256.Encrypt),','# re-checked against `openssl enc` when this file was made.','']
for b in (128,192,256):
    assert openssl_enc(f'aes-{b}-ecb',bytes.fromhex(K[b]),None,bytes.fromhex(P)).hex()==ECB[b]
    lines+=[f'Vector = ECB-AES{b}',f'Key = {K[b]}',f'PT = {P}',f'CT = {ECB[b]}','']
open(f'{out_dir}/ecb_aes_sp800_38a.txt','w').write('\n'.join(lines))

# ---- PBKDF2
def okdf(h,pw,salt,it,n):
    r=subprocess.run(['openssl','kdf','-keylen',str(n),'-kdfopt','digest:'+h,'-kdfopt','hexpass:'+pw.hex(),'-kdfopt','hexsalt:'+salt.hex(),'-kdfopt',f'iter:{it}','-binary','PBKDF2'],capture_output=True,check=True).stdout
    return r.hex()
pb=[('RFC 6070 1','sha1',b'password',b'salt',1,20,'0c60c80f961f0e71f3a9b524af6012062fe037a6'),
    ('RFC 6070 2','sha1',b'password',b'salt',2,20,'ea6c014dc72d6f8ccd1ed92ace1d41f0d8de8957'),
    ('RFC 6070 3','sha1',b'password',b'salt',4096,20,'4b007901b765489abead49d926f721d065a429c1'),
    ('RFC 6070 5','sha1',b'passwordPASSWORDpassword',b'saltSALTsaltSALTsaltSALTsaltSALTsalt',4096,25,'3d2eec4fe41c849b80c8d83662c0e44a8b291a964cf2f07038'),
    ('RFC 6070 6','sha1',b'pass\0word',b'sa\0lt',4096,16,'56fa6aa75548099dcc37d7f03425e0c3'),
    ('RFC 7914 11.1','sha256',b'passwd',b'salt',1,64,'55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783'),
    ('RFC 7914 11.2','sha256',b'Password',b'NaCl',80000,64,'4ddcd8f60b98be21830cee5ef22701f9641a4418d04c0414aeff08876b34ab56a1d425a1225833549adb841b51c9b3176a272bdebba1d078478f62b397f33c8d'),
    ('Botan pbkdf2.vec SHA-512','sha512',b'xyz',bytes.fromhex('0001020304050607'),10000,48,'daf8a734327745eb63d19054dbd4018a682cef11086a1bfb63fdbc16158c2f8b0742802f36aef1b1df92accbea5d31a5'),
   ]
lines=['# PBKDF2-HMAC (RFC 8018). RFC 6070 (SHA-1; the 16777216-iteration case is left out),',
       '# RFC 7914 section 11 (SHA-256) and a SHA-512 case from Botan src/tests/data/pbkdf/pbkdf2.vec,',
       '# each re-checked against `openssl kdf PBKDF2` when this file was made. Password and Salt are hex.','']
for name,h,pw,salt,it,n,want in pb:
    assert okdf(h.upper(),pw,salt,it,n)==want,name
    lines+=[f'Vector = {name}',f'Hash = {h}',f'Password = {pw.hex()}',f'Salt = {salt.hex()}',f'Iterations = {it}',f'Output = {want}','']
open(f'{out_dir}/pbkdf2.txt','w').write('\n'.join(lines))
print('ok')
