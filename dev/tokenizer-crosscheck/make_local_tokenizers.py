# Local stand-ins for make_fixtures.py's tokenizers (naive BPE training), for checking against HF tokenizers' node binding.
import json, re, collections, os, sys
HERE=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'tests', 'fixtures', 'tokenizers')
text=open(f'{HERE}/training_corpus.txt',encoding='utf-8').read()
def bytes_to_unicode():
    bs=list(range(ord("!"),ord("~")+1))+list(range(ord("¡"),ord("¬")+1))+list(range(ord("®"),ord("ÿ")+1))
    cs=bs[:]; n=0
    for b in range(256):
        if b not in bs: bs.append(b); cs.append(256+n); n+=1
    return {b:chr(c) for b,c in zip(bs,cs)}
B2U=bytes_to_unicode()
def train(words, alphabet, nmerges):
    vocab={a:i for i,a in enumerate(alphabet)}
    wc=collections.Counter(words)
    seqs={w:list(w) for w in wc}
    merges=[]
    for _ in range(nmerges):
        pc=collections.Counter()
        for w,c in wc.items():
            s=seqs[w]
            for a,b in zip(s,s[1:]): pc[(a,b)]+=c
        if not pc: break
        (a,b),_=max(pc.items(), key=lambda kv:(kv[1],kv[0]))
        merges.append([a,b]); vocab.setdefault(a+b,len(vocab))
        for w in wc:
            s=seqs[w]; i=0; o=[]
            while i<len(s):
                if i+1<len(s) and s[i]==a and s[i+1]==b: o.append(a+b); i+=2
                else: o.append(s[i]); i+=1
            seqs[w]=o
    return vocab, merges
def added(content,id,special=True,normalized=False,lstrip=False,rstrip=False,single_word=False):
    return dict(id=id,content=content,single_word=single_word,lstrip=lstrip,rstrip=rstrip,normalized=normalized,special=special)
def bpe(vocab,merges,**kw):
    m=dict(type="BPE",dropout=None,unk_token=None,continuing_subword_prefix=None,end_of_word_suffix=None,fuse_unk=False,byte_fallback=False,ignore_merges=False,vocab=vocab,merges=merges); m.update(kw); return m
def tj(model,pre=None,norm=None,post=None,dec=None,added_tokens=()):
    return dict(version="1.0",truncation=None,padding=None,added_tokens=list(added_tokens),normalizer=norm,pre_tokenizer=pre,model=model,post_processor=post,decoder=dec)
words=re.findall(r" ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+",text)
bl_words=[''.join(B2U[b] for b in w.encode()) for w in words]
alpha=[B2U[b] for b in range(256)]
vocab,merges=train(bl_words,sorted(alpha,key=lambda c:[k for k,v in B2U.items() if v==c][0]),256)
out={}
n=len(vocab)
GPT2=r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
L3=r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
Q2=L3.replace(r"\p{N}{1,3}",r"\p{N}")
out['gpt2']=tj(bpe(vocab,merges),pre=dict(type="ByteLevel",add_prefix_space=False,trim_offsets=True,use_regex=True),post=dict(type="ByteLevel",add_prefix_space=True,trim_offsets=False,use_regex=True),dec=dict(type="ByteLevel",add_prefix_space=True,trim_offsets=True,use_regex=True),added_tokens=[added("<|endoftext|>",n),added("<mask>",n+1,lstrip=True)])
out['roberta']=tj(bpe(vocab,merges),pre=dict(type="ByteLevel",add_prefix_space=True,trim_offsets=True,use_regex=True),post=dict(type="RobertaProcessing",sep=["</s>",n+3],cls=["<s>",n+2],trim_offsets=True,add_prefix_space=True),dec=dict(type="ByteLevel",add_prefix_space=True,trim_offsets=True,use_regex=True),added_tokens=[added("<|endoftext|>",n),added("<mask>",n+1,lstrip=True),added("<s>",n+2),added("</s>",n+3)])
tmpl=lambda bos,bid,eos=None,eid=None: dict(type="TemplateProcessing",single=[{"SpecialToken":{"id":bos,"type_id":0}},{"Sequence":{"id":"A","type_id":0}}]+([{"SpecialToken":{"id":eos,"type_id":0}}] if eos else []),pair=[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],special_tokens={**{bos:{"id":bos,"ids":[bid],"tokens":[bos]}},**({eos:{"id":eos,"ids":[eid],"tokens":[eos]}} if eos else {})})
out['llama3']=tj(bpe(vocab,merges,ignore_merges=True),pre=dict(type="Sequence",pretokenizers=[dict(type="Split",pattern={"Regex":L3},behavior="Isolated",invert=False),dict(type="ByteLevel",add_prefix_space=False,trim_offsets=True,use_regex=False)]),post=dict(type="Sequence",processors=[dict(type="ByteLevel",add_prefix_space=True,trim_offsets=False,use_regex=True),tmpl("<|begin_of_text|>",n)]),dec=dict(type="ByteLevel",add_prefix_space=True,trim_offsets=True,use_regex=True),added_tokens=[added("<|begin_of_text|>",n),added("<|end_of_text|>",n+1),added("<|eot_id|>",n+2),added("<tool>",n+3,special=False)])
out['qwen2']=tj(bpe(vocab,merges),norm=dict(type="NFC"),pre=dict(type="Sequence",pretokenizers=[dict(type="Split",pattern={"Regex":Q2},behavior="Isolated",invert=False),dict(type="ByteLevel",add_prefix_space=False,trim_offsets=False,use_regex=False)]),post=dict(type="ByteLevel",add_prefix_space=False,trim_offsets=False,use_regex=False),dec=dict(type="ByteLevel",add_prefix_space=False,trim_offsets=False,use_regex=False),added_tokens=[added("<|endoftext|>",n),added("<|im_start|>",n+1),added("<|im_end|>",n+2),added("<tool>",n+3,special=False)])
# spm-style
sw=["▁"+w.strip() for w in text.split(" ") if w.strip()]
chars=[c for c,_ in collections.Counter(''.join(sw)).most_common(120)]
sw2=[w for w in sw if all(c in chars for c in w)]
v2,m2=train(sw2,chars,250)
bt=[f"<0x{b:02X}>" for b in range(256)]
order=["<unk>","<s>","</s>"]+bt+[t for t,_ in sorted(v2.items(),key=lambda kv:kv[1])]
sv={t:i for i,t in enumerate(order)}
spm_added=[added("<unk>",0),added("<s>",1),added("</s>",2)]
out['spm_legacy']=tj(bpe(sv,m2,unk_token="<unk>",fuse_unk=True,byte_fallback=True),norm=dict(type="Sequence",normalizers=[dict(type="Prepend",prepend="▁"),dict(type="Replace",pattern={"String":" "},content="▁")]),post=tmpl("<s>",1),dec=dict(type="Sequence",decoders=[dict(type="Replace",pattern={"String":"▁"},content=" "),dict(type="ByteFallback"),dict(type="Fuse"),dict(type="Strip",content=" ",start=1,stop=0)]),added_tokens=spm_added+[added("<tool>",len(sv),special=False,normalized=True)])
out['spm_metaspace']=tj(bpe(sv,m2,unk_token="<unk>",fuse_unk=True,byte_fallback=True),pre=dict(type="Metaspace",replacement="▁",prepend_scheme="first",split=False),post=tmpl("<s>",1,"</s>",2),dec=dict(type="Metaspace",replacement="▁",prepend_scheme="first",split=False),added_tokens=spm_added)
dst=sys.argv[1]
for k,v in out.items():
    os.makedirs(f'{dst}/{k}',exist_ok=True)
    json.dump(v,open(f'{dst}/{k}/tokenizer.json','w'),ensure_ascii=False)
    specials={'gpt2':('<|endoftext|>','<|endoftext|>'),'roberta':('<s>','</s>'),'llama3':('<|begin_of_text|>','<|eot_id|>'),
              'qwen2':(None,'<|im_end|>')}.get(k,('<s>','</s>'))
    json.dump({kk:vv for kk,vv in zip(('bos_token','eos_token'),specials) if vv},open(f'{dst}/{k}/tokenizer_config.json','w'))
print('ok', {k: len(v['model']['vocab']) for k,v in out.items()})
