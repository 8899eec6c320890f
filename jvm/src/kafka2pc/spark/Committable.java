package kafka2pc.spark;

import java.util.Map;
import java.util.TreeMap;

/**
 * A prepared transaction's committable, written as JSON exactly as the Python side's
 * {@code Committable.to_json()} writes it ({@code json.dumps(..., sort_keys=True)}: sorted
 * keys, ", " and ": " separators, non-ASCII escaped), so both writers hand the driver, the
 * manifest and the ledger the same text.
 */
final class Committable {
    static final int SCHEMA_VERSION = 1;
    static final int TRANSACTION_VERSION_CLASSIC = 1;
    static final int TRANSACTION_VERSION_KIP890 = 2;

    private Committable() {
    }

    /** One Kafka partition's share of a transaction (offsets inclusive). */
    static final class Range {
        long first = Long.MAX_VALUE;
        long last = -1;
        long count;

        void add(long offset) {
            first = Math.min(first, offset);
            last = Math.max(last, offset);
            count++;
        }
    }

    static String json(
            String transactionalId,
            long producerId,
            int producerEpoch,
            int transactionVersion,
            TreeMap<String, TreeMap<Integer, Range>> partitions,
            long startTimeMs,
            long transactionTimeoutMs) {
        StringBuilder out = new StringBuilder(256);
        out.append("{\"partitions\": [");
        long total = 0;
        boolean first = true;
        for (Map.Entry<String, TreeMap<Integer, Range>> topic : partitions.entrySet()) {
            for (Map.Entry<Integer, Range> entry : topic.getValue().entrySet()) {
                Range range = entry.getValue();
                total += range.count;
                out.append(first ? "" : ", ")
                        .append("{\"first_offset\": ").append(range.first)
                        .append(", \"last_offset\": ").append(range.last)
                        .append(", \"partition\": ").append(entry.getKey())
                        .append(", \"record_count\": ").append(range.count)
                        .append(", \"topic\": ");
                string(out, topic.getKey()).append('}');
                first = false;
            }
        }
        out.append("], \"producer_epoch\": ").append(producerEpoch)
                .append(", \"producer_id\": ").append(producerId)
                .append(", \"record_count\": ").append(total)
                .append(", \"schema\": ").append(SCHEMA_VERSION)
                .append(", \"start_time_ms\": ").append(startTimeMs)
                .append(", \"transaction_timeout_ms\": ").append(transactionTimeoutMs)
                .append(", \"transaction_version\": ").append(transactionVersion)
                .append(", \"transactional_id\": ");
        return string(out, transactionalId).append('}').toString();
    }

    /** No record, so no transaction opened: what the Python writer reports alike. */
    static String empty(String transactionalId, long startTimeMs, long transactionTimeoutMs) {
        return json(transactionalId, -1, -1, TRANSACTION_VERSION_CLASSIC, new TreeMap<>(),
                startTimeMs, transactionTimeoutMs);
    }

    /** A JSON string as Python's json module writes it with ensure_ascii. */
    static StringBuilder string(StringBuilder out, String text) {
        out.append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    if (c < 0x20 || c > 0x7e) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"');
    }
}
