# Reproduce with: pip install torch transformers onnxruntime numpy; python make_models.py runtime/tests/data/dynamic
# Makes small BERT and GPT-2 exports with symbolic batch and sequence dimensions, inputs at
# batch 1 and 4, and ONNX Runtime's outputs (run on a development machine; CI never runs torch).
import sys, numpy as np, torch, onnxruntime as ort
from transformers import BertConfig, BertModel, GPT2Config, GPT2Model
out = sys.argv[1]
torch.manual_seed(0)

class Wrap(torch.nn.Module):
    def __init__(self, m):
        super().__init__(); self.inner = m
    def forward(self, input_ids, attention_mask):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

models = {
    "bert_dyn": BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64)),
    "gpt2_dyn": GPT2Model(GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)),
}
rng = np.random.default_rng(0)
for name, m in models.items():
    m.eval()
    w = Wrap(m)
    ids = torch.randint(0, 100, (2, 8)); mask = torch.ones(2, 8, dtype=torch.int64)
    torch.onnx.export(w, (ids, mask), f"{out}/{name}.onnx", opset_version=17, dynamo=False,
                      do_constant_folding=True, input_names=["input_ids", "attention_mask"], output_names=["output"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                                    "output": {0: "batch", 1: "sequence"}})
    sess = ort.InferenceSession(f"{out}/{name}.onnx", providers=["CPUExecutionProvider"])
    for b, s in [(1, 5), (4, 12)]:
        ids = rng.integers(0, 100, (b, s)).astype(np.int64)
        mask = np.ones((b, s), np.int64); mask[-1, s - 2:] = 0
        np.save(f"{out}/{name}.b{b}.input_ids.npy", ids)
        np.save(f"{out}/{name}.b{b}.attention_mask.npy", mask)
        np.save(f"{out}/{name}.b{b}.ref.npy", sess.run(None, {"input_ids": ids, "attention_mask": mask})[0])
print("ok")
