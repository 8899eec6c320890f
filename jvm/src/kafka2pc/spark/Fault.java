package kafka2pc.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.kafka.clients.producer.Producer;

/**
 * A test-only fault, read from the task's local property {@link #PROPERTY} (set on the
 * driver with {@code SparkContext.setLocalProperty}): the tests' equivalent of the Python
 * path's {@code on_batch} hook. Format {@code partition,rows,attempts,mode}: once partition
 * {@code partition} has sent {@code rows} rows in one of its first {@code attempts} task
 * attempts (-1: every attempt), it fails. Mode {@code die} leaves the transaction open as a
 * dead executor would (flush, then {@code close(Duration.ZERO)}), {@code fail} raises
 * through the writer's own error path (which aborts).
 */
final class Fault {
    static final String PROPERTY = "kafka2pc.test.fault";

    private final int partition;
    private final long rows;
    private final int attempts;
    private final String mode;
    private final String marker;

    private Fault(int partition, long rows, int attempts, String mode, String marker) {
        this.partition = partition;
        this.rows = rows;
        this.attempts = attempts;
        this.mode = mode;
        this.marker = marker;
    }

    /** The fault in {@code text}, or null when there is none. */
    static Fault parse(String text) {
        if (text == null || text.isEmpty()) {
            return null;
        }
        String[] parts = text.split(",", 5);
        if (parts.length < 4 || !(parts[3].equals("die") || parts[3].equals("fail")
                || parts[3].equals("halt"))) {
            throw new IllegalArgumentException(
                    PROPERTY + " must be partition,rows,attempts,die|fail|halt[,marker]");
        }
        return new Fault(Integer.parseInt(parts[0]), Long.parseLong(parts[1]),
                Integer.parseInt(parts[2]), parts[3], parts.length == 5 ? parts[4] : null);
    }

    /** Fails here when this task is the one, at the row count given. */
    void check(int taskPartition, int attempt, long sent, Producer<byte[], byte[]> producer) {
        if (taskPartition != partition || sent != rows || (attempts >= 0 && attempt >= attempts)) {
            return;
        }
        if (mode.equals("halt")) {
            producer.flush(); // the records are in the log, their transaction open
            mark(attempt, sent);
            Runtime.getRuntime().halt(137); // no shutdown hook, no close: as SIGKILL
        }
        if (mode.equals("die")) {
            producer.flush(); // the records are in the log, their transaction open
            mark(attempt, sent);
            throw new Died("kafka2pc injected fault: partition " + partition + " died after "
                    + rows + " rows (attempt " + attempt + ")");
        }
        throw new IllegalStateException("kafka2pc injected fault: partition " + partition
                + " cannot be written (attempt " + attempt + ")");
    }

    private void mark(int attempt, long sent) {
        if (marker == null) {
            return;
        }
        String facts = "{\"mode\": \"" + mode + "\", \"partition\": " + partition
                + ", \"attempt\": " + attempt + ", \"rows\": " + sent + ", \"victim\": "
                + ProcessHandle.current().pid() + "}";
        try {
            Files.writeString(Path.of(marker), facts, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new IllegalStateException("kafka2pc injected fault: cannot write " + marker, e);
        }
    }

    /** The executor "died": no abort, the transaction is left to be fenced. */
    static final class Died extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Died(String message) {
            super(message);
        }
    }
}
