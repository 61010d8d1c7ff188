#!/usr/bin/env node
// Reads an MCAP file with the stock TypeScript reader (@mcap/core's McapIndexedReader) and prints a
// JSON summary: message counts and schema names per topic, metadata record names, the number of chunk
// indexes and the chunk compressions used. tests/episodes/test_ts_reader.py runs it on megahour files.
//
// Usage: node read_mcap.mjs FILE.mcap
//
// The npm packages are loaded by load_npm.mjs.

import { open } from "node:fs/promises";

import { fail, load, modulesDir } from "./load_npm.mjs";

// IReadable over a file: size() and read(offset, length), both bigint, as @mcap/core expects.
class FileReadable {
  constructor(handle, size) {
    this.handle = handle;
    this.bytes = size;
  }

  async size() {
    return BigInt(this.bytes);
  }

  async read(offset, length) {
    if (offset + length > BigInt(this.bytes)) {
      throw new Error(`read past the end of the file: offset ${offset}, length ${length}, size ${this.bytes}`);
    }
    const buffer = new Uint8Array(Number(length));
    let done = 0;
    while (done < buffer.length) {
      const { bytesRead } = await this.handle.read(buffer, done, buffer.length - done, Number(offset) + done);
      if (bytesRead === 0) {
        throw new Error(`unexpected end of file at ${Number(offset) + done}`);
      }
      done += bytesRead;
    }
    return buffer;
  }
}

async function main() {
  const path = process.argv[2];
  if (!path || process.argv.length > 3) {
    fail("usage: node read_mcap.mjs FILE.mcap");
  }
  const { McapIndexedReader } = await load("@mcap/core");
  const { decompress } = await load("fzstd");
  if (typeof McapIndexedReader?.Initialize !== "function" || typeof decompress !== "function") {
    fail(`unexpected exports from @mcap/core or fzstd under ${modulesDir}`);
  }

  let handle;
  try {
    handle = await open(path, "r");
  } catch (err) {
    fail(`cannot open ${path}: ${err.message}`);
  }
  try {
    const { size } = await handle.stat();
    const reader = await McapIndexedReader.Initialize({
      readable: new FileReadable(handle, size),
      decompressHandlers: {
        zstd: (data, decompressedSize) => {
          const out = decompress(data, new Uint8Array(Number(decompressedSize)));
          if (out.length !== Number(decompressedSize)) {
            throw new Error(`zstd chunk decompressed to ${out.length} bytes, expected ${decompressedSize}`);
          }
          return out;
        },
      },
    });

    const topics = {};
    const schemas = {};
    for (const channel of reader.channelsById.values()) {
      topics[channel.topic] ??= 0;
      const schema = reader.schemasById.get(channel.schemaId);
      schemas[channel.topic] = schema ? schema.name : "";
    }
    let messages = 0;
    for await (const message of reader.readMessages()) {
      const channel = reader.channelsById.get(message.channelId);
      if (!channel) {
        throw new Error(`message on unknown channel ${message.channelId}`);
      }
      topics[channel.topic] = (topics[channel.topic] ?? 0) + 1;
      messages += 1;
    }

    const metadata = [];
    if (typeof reader.readMetadata === "function") {
      for await (const record of reader.readMetadata()) {
        metadata.push(record.name);
      }
    } else {
      for (const index of reader.metadataIndexes) {
        metadata.push(index.name);
      }
    }

    const compressions = [...new Set(reader.chunkIndexes.map((index) => index.compression))].sort();
    const summary = {
      file: path,
      messages,
      topics,
      schemas,
      metadata,
      chunks: reader.chunkIndexes.length,
      compressions,
    };
    process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  } finally {
    await handle.close();
  }
}

main().catch((err) => fail(`cannot read ${process.argv[2]}: ${err?.stack ?? err}`));
