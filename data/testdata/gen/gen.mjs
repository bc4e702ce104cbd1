// Writes ../hub/data/train-0000{0,1}-of-00002.parquet: the two conversations
// of ../messages.jsonl as a Hugging Face Hub dataset would store them, one row
// per shard, with a `messages: list<struct<role, content>>` column (the list
// element named "element", as pyarrow writes it) and an extra `source` column.
// The writer is arrow-rs's, through parquet-wasm; the first shard is
// Snappy-compressed (pyarrow's default), the second Zstandard.
//
//   cd data/testdata/gen && npm install && node gen.mjs
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { Field, List, Struct, Table, Utf8, tableToIPC, vectorFromArray } from "apache-arrow";
import * as pq from "parquet-wasm/node";

const rows = readFileSync(new URL("../messages.jsonl", import.meta.url), "utf8")
  .split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l));

const message = new Struct([new Field("role", new Utf8(), true), new Field("content", new Utf8(), true)]);
const messages = new List(new Field("element", message, true));

mkdirSync(new URL("../hub/data/", import.meta.url), { recursive: true });
rows.forEach((row, i) => {
  const table = new Table({
    messages: vectorFromArray([row.messages], messages),
    source: vectorFromArray([`messages.jsonl line ${2 * i + 1}`], new Utf8()),
  });
  const props = new pq.WriterPropertiesBuilder()
    .setCompression(i === 0 ? pq.Compression.SNAPPY : pq.Compression.ZSTD)
    .build();
  const out = pq.writeParquet(pq.Table.fromIPCStream(tableToIPC(table, "stream")), props);
  const name = `../hub/data/train-0000${i}-of-00002.parquet`;
  writeFileSync(new URL(name, import.meta.url), out);
  console.log(name, out.length, "bytes");
});
