import hashlib
out=__import__('os').path.join(__import__('os').path.dirname(__import__('os').path.abspath(__file__)), '..')
def H(name,data): return hashlib.new(name,data).digest()
def diffuse(buf,name):
    ds=hashlib.new(name).digest_size
    res=b''
    for i in range(0,len(buf),ds):
        chunk=buf[i:i+ds]
        res+=H(name,(i//ds).to_bytes(4,'big')+chunk)[:len(chunk)]
    return res
def xor(a,b): return bytes(x^y for x,y in zip(a,b))
def merge(m,n,stripes,name):
    acc=bytes(n)
    for s in range(stripes-1):
        acc=diffuse(xor(acc,m[s*n:(s+1)*n]),name)
    return xor(acc,m[(stripes-1)*n:])
lines=['# LUKS AF merge vectors, hand-derived with a separate Python implementation of',
'# cryptsetup lib/luks1/af.c (hashlib; diffuse hashes be32(i) || chunk per digest-sized',
'# chunk, the last partial chunk too). Material byte j = (j * 7 + 3) mod 256.','']
for name,n,stripes in [('sha1',32,4),('sha256',16,3),('sha512',64,2),('sha256',64,5),('sha1',20,1),('sha512',100,3)]:
    m=bytes((j*7+3)&0xff for j in range(n*stripes))
    k=merge(m,n,stripes,name)
    lines+=[f'Hash = {name}',f'KeyLen = {n}',f'Stripes = {stripes}',f'Material = {m.hex()}',f'Key = {k.hex()}','']
open(f'{out}/af_merge.txt','w').write('\n'.join(lines))
