package kafka2pc.spark;

import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The JVM writer as a DataSource V2 sink, {@code df.write.format("kafka2pc")}: how a Spark
 * Connect client, which has no py4j into the server's JVM, runs {@link PartitionTransaction}
 * in the executors. Write-only, batch only; any schema is taken as the encoded rows'
 * (the driver has already encoded and partitioned them, one partition per transactional id).
 *
 * <p>The options ({@link PrepareBatchWrite#OPTIONS}) carry no secret: a Connect server shows
 * a write's options in its UI and event log whatever their keys, so the producer settings
 * travel as a session setting whose key the server redacts (see {@link PrepareBatchWrite}).
 */
public final class Kafka2pcSource implements TableProvider, DataSourceRegister {
    public static final String SHORT_NAME = "kafka2pc";

    @Override
    public String shortName() {
        return SHORT_NAME;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        throw new UnsupportedOperationException(
                "kafka2pc is a write-only data source: df.write.format(\"kafka2pc\")");
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true; // the table's schema is the written frame's
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new Sink(schema);
    }

    /** The one table: takes the encoded rows as they are. */
    private static final class Sink implements SupportsWrite {
        private final Column[] columns;

        Sink(StructType schema) {
            columns = new Column[schema.fields().length];
            for (int i = 0; i < columns.length; i++) {
                StructField field = schema.fields()[i];
                columns[i] = Column.create(field.name(), field.dataType(), field.nullable());
            }
        }

        @Override
        public Column[] columns() {
            return columns.clone();
        }

        @Override
        public String name() {
            return SHORT_NAME;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return Set.of(TableCapability.BATCH_WRITE);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            return PrepareBatchWrite.builder(info);
        }
    }
}
