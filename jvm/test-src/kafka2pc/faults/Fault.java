package kafka2pc.faults;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

import kafka2pc.spark.WriterHook;
import org.apache.kafka.clients.producer.Producer;

/**
 * The tests' fault, a {@link WriterHook} (test jar only: the product jar cannot load it):
 * the JVM writer's equivalent of the Python writer's {@code on_batch} hook. Named as
 * {@code kafka2pc.faults.Fault:partition,rows,attempts,mode[,marker]} in the task local
 * property (or Connect session setting) {@link WriterHook#PROPERTY}: once partition
 * {@code partition} has sent {@code rows} rows in one of its first {@code attempts} task
 * attempts (-1: every attempt), it fails. Mode {@code die} leaves the transaction open as a
 * dead executor would (flush, then {@code close(Duration.ZERO)}: the writer's abort then
 * finds the producer closed), {@code fail} raises through the writer's own error path
 * (which aborts), {@code halt} flushes and halts the JVM. Mode {@code late} fails nothing:
 * {@code rows} is a delay in milliseconds that the task waits before it opens its
 * transaction (a task that opens late; {@code partition} -1: every task), its marker
 * written as it starts waiting; an interrupt (Spark's kill) ends the wait early. {@code marker}: a file the fault writes its
 * facts to (JSON) before it dies, halts or waits.
 */
public final class Fault implements WriterHook {
    private final int partition;
    private final long rows;
    private final int attempts;
    private final String mode;
    private final String marker;

    /** Parses {@code partition,rows,attempts,die|fail|halt[,marker]}. */
    public Fault(String text) {
        String[] parts = text.split(",", 5);
        if (parts.length < 4 || !(parts[3].equals("die") || parts[3].equals("fail")
                || parts[3].equals("halt") || parts[3].equals("late"))) {
            throw new IllegalArgumentException("kafka2pc.faults.Fault takes "
                    + "partition,rows,attempts,die|fail|halt|late[,marker]");
        }
        partition = Integer.parseInt(parts[0]);
        rows = Long.parseLong(parts[1]);
        attempts = Integer.parseInt(parts[2]);
        mode = parts[3];
        marker = parts.length == 5 ? parts[4] : null;
    }

    /** Mode {@code late}: waits {@code rows} ms when this task is the one. */
    @Override
    public void beforeOpen(int taskPartition, int attempt) {
        if (!mode.equals("late") || (partition >= 0 && taskPartition != partition)
                || (attempts >= 0 && attempt >= attempts)) {
            return;
        }
        mark(attempt, 0);
        try {
            Thread.sleep(rows);
        } catch (InterruptedException killed) {
            Thread.currentThread().interrupt(); // the writer asks Spark next: killed, it stops
        }
    }

    /** Fails here when this task is the one, at the row count given. */
    @Override
    public void afterSend(int taskPartition, int attempt, long sent, Producer<byte[], byte[]> producer) {
        if (mode.equals("late") || taskPartition != partition || sent != rows
                || (attempts >= 0 && attempt >= attempts)) {
            return;
        }
        if (mode.equals("fail")) {
            throw new IllegalStateException("kafka2pc injected fault: partition " + partition
                    + " cannot be written (attempt " + attempt + ")");
        }
        producer.flush(); // the records are in the log, their transaction open
        mark(attempt, sent);
        if (mode.equals("halt")) {
            Runtime.getRuntime().halt(137); // no shutdown hook, no close: as SIGKILL
        }
        producer.close(Duration.ZERO); // no abort, as a dead executor: left to be fenced
        throw new Died("kafka2pc injected fault: partition " + partition + " died after "
                + rows + " rows (attempt " + attempt + ")");
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

    /** The executor "died": its producer closed without an abort. */
    static final class Died extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Died(String message) {
            super(message);
        }
    }
}
