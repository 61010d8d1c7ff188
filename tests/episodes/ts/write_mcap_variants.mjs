#!/usr/bin/env node
// Writes one MCAP file per combination of the official TypeScript writer's (@mcap/core McapWriter)
// nine switches: 2^9 = 512 files, named by the switches they had. Every file holds the same content:
// the messages of messageAt() below, a metadata record and an attachment, with the third channel
// registered after the first messages (so it is first seen in a later chunk or record). The test
// (tests/episodes/test_mcapscan.py) rebuilds the expected messages with the same formula.
//
// Usage: node write_mcap_variants.mjs OUT_DIR    (prints a JSON list of {file, options})

import { mkdir, open } from "node:fs/promises";
import { join } from "node:path";

import { fail, load } from "./load_npm.mjs";

export const SWITCHES = [
  "useStatistics",
  "useSummaryOffsets",
  "useChunks",
  "repeatSchemas",
  "repeatChannels",
  "useAttachmentIndex",
  "useMetadataIndex",
  "useMessageIndex",
  "useChunkIndex",
];
const MESSAGES = 120;

// Message i: on channel i % 3 (the third channel exists from message 30 on), log time 1000 + 7 i.
function messageAt(i) {
  const channel = i < 30 ? i % 2 : i % 3;
  return { channel, logTime: 1000n + 7n * BigInt(i), data: new TextEncoder().encode(`m${i}:`.padEnd(20 + (i % 13), "x")) };
}

class FileWritable {
  constructor(handle) {
    this.handle = handle;
    this.offset = 0n;
  }

  async write(buffer) {
    await this.handle.write(buffer);
    this.offset += BigInt(buffer.byteLength);
  }

  position() {
    return this.offset;
  }
}

async function writeVariant(McapWriter, path, options) {
  const handle = await open(path, "w");
  try {
    const writer = new McapWriter({ writable: new FileWritable(handle), chunkSize: 300, ...options });
    await writer.start({ profile: "", library: "write_mcap_variants.mjs" });
    const schema = await writer.registerSchema({ name: "test.Blob", encoding: "protobuf", data: new Uint8Array([1, 2, 3]) });
    const ids = [
      await writer.registerChannel({ topic: "/a", schemaId: schema, messageEncoding: "protobuf", metadata: new Map() }),
      await writer.registerChannel({ topic: "/b", schemaId: 0, messageEncoding: "json", metadata: new Map([["k", "v"]]) }),
    ];
    for (let i = 0; i < MESSAGES; i++) {
      if (i === 30) {
        ids.push(await writer.registerChannel({ topic: "/late", schemaId: schema, messageEncoding: "protobuf", metadata: new Map() }));
      }
      const m = messageAt(i);
      await writer.addMessage({ channelId: ids[m.channel], sequence: i, logTime: m.logTime, publishTime: m.logTime, data: m.data });
      if (i === 60) {
        await writer.addMetadata({ name: "labels", metadata: new Map([["robot", "r1"]]) });
        await writer.addAttachment({ name: "calib.json", logTime: 1n, createTime: 2n, mediaType: "application/json", data: new Uint8Array([123, 125]) });
      }
    }
    await writer.end();
  } finally {
    await handle.close();
  }
}

async function main() {
  const out = process.argv[2];
  if (!out || process.argv.length > 3) {
    fail("usage: node write_mcap_variants.mjs OUT_DIR");
  }
  const { McapWriter } = await load("@mcap/core");
  if (typeof McapWriter !== "function") {
    fail("@mcap/core has no McapWriter");
  }
  await mkdir(out, { recursive: true });
  const written = [];
  for (let bits = 0; bits < 1 << SWITCHES.length; bits++) {
    const options = Object.fromEntries(SWITCHES.map((name, k) => [name, Boolean(bits & (1 << k))]));
    const file = join(out, `variant-${bits.toString(2).padStart(SWITCHES.length, "0")}.mcap`);
    await writeVariant(McapWriter, file, options);
    written.push({ file, options });
  }
  process.stdout.write(`${JSON.stringify(written)}\n`);
}

await main();
