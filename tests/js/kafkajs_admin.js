// KafkaJS admin calls for the tests (tests/support/kafkajs.py): one operation per run, its
// answer as one JSON line on stdout. Usage: node kafkajs_admin.js BOOTSTRAP OPERATION ARGS...
//   reset-earliest GROUP TOPIC   admin.resetOffsets({earliest: true}), then admin.fetchOffsets
//   alter-config TOPIC NAME VALUE  admin.alterConfigs on a topic: the error (type, code) or ok
const { Kafka, logLevel, ConfigResourceTypes } = require("kafkajs");

async function main() {
  const [bootstrap, op, ...args] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "skiff-kafkajs", brokers: bootstrap.split(","), logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  try {
    if (op === "reset-earliest") {
      const [groupId, topic] = args;
      await admin.resetOffsets({ groupId, topic, earliest: true });
      const fetched = await admin.fetchOffsets({ groupId, topics: [topic] });
      return { type: "offsets", offsets: fetched[0].partitions };
    }
    if (op === "alter-config") {
      const [topic, name, value] = args;
      try {
        await admin.alterConfigs({
          validateOnly: false,
          resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name, value }] }],
        });
        return { type: "altered", error: null };
      } catch (e) {
        return { type: "altered", error: e.type || e.name, code: e.code === undefined ? null : e.code };
      }
    }
    throw new Error(`unknown operation ${op}`);
  } finally {
    await admin.disconnect();
  }
}

main().then(
  (out) => { process.stdout.write(JSON.stringify(out) + "\n"); },
  (e) => { process.stderr.write(`${e.name}: ${e.message}\n`); process.exit(1); },
);
