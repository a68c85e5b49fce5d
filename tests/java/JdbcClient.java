// The PostgreSQL JDBC driver (pgjdbc) for pg_wire/jdbc.rs, as DBeaver and
// Metabase use it: connect, browse with DatabaseMetaData, run statements.
//
// Usage: java -cp postgresql.jar JdbcClient.java JSON_ARGS   (Java 17's
// single-file source launcher; prints one JSON object, never a stack trace).
//
// JSON_ARGS:
//   {"url": "jdbc:postgresql://localhost:PORT/demo?sslmode=verify-full&sslrootcert=CERT",
//    "user": CLIENT_ID, "password": CLIENT_SECRET,
//    "browse": {"schema": S, "table": T},       (optional: the DatabaseMetaData calls)
//    "autocommit": false,                       (optional: then commit() after the statements)
//    "statements": [{"sql": SQL, "params": [1, "x", null, {"previous": COLUMN}], "repeat": N,
//                    "max_rows": M}, ...]}
//
// A statement with "params" runs as a PreparedStatement (an integer is
// setInt, or setLong past 32 bits; a string setString; true/false
// setBoolean; null setNull as VARCHAR; {"date": "2026-01-10"} setDate,
// {"timestamp": "2026-01-10 12:00:00"} setTimestamp, {"decimal": "1.50"}
// setBigDecimal; {"previous": COLUMN} that column of
// the previous statement's first row), one without as a plain Statement;
// "repeat" runs it N times (pgjdbc prepares it on the server from the 5th
// run on, and reads results in binary) and reports the last; "max_rows" is
// setMaxRows(M) (pgjdbc then asks for at most M rows and closes the portal,
// as DBeaver's previews do). Each metadata
// call and statement gives its rows or its error ({"error": the server's
// message, "sqlstate": code}); the client goes on to the next.

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.postgresql.util.PSQLException;

public class JdbcClient {
    /** A call that reads the server, for `attempt`. */
    interface Call {
        Object run() throws SQLException;
    }

    public static void main(String[] argv) {
        @SuppressWarnings("unchecked")
        Map<String, Object> args = (Map<String, Object>) new JsonReader(argv[0]).value();
        System.out.println(Json.write(run(args)));
    }

    static Map<String, Object> run(Map<String, Object> args) {
        Map<String, Object> out = new LinkedHashMap<>();
        Properties properties = new Properties();
        properties.setProperty("user", (String) args.get("user"));
        properties.setProperty("password", (String) args.get("password"));
        properties.setProperty("connectTimeout", "10");
        Connection conn;
        try {
            conn = DriverManager.getConnection((String) args.get("url"), properties);
        } catch (SQLException e) {
            out.put("connect", error(e));
            return out;
        }
        try (conn) {
            @SuppressWarnings("unchecked")
            Map<String, Object> browse = (Map<String, Object>) args.get("browse");
            if (browse != null) {
                out.put("metadata", browse(conn.getMetaData(), (String) browse.get("schema"),
                        (String) browse.get("table")));
            }
            boolean autocommit = !Boolean.FALSE.equals(args.get("autocommit"));
            out.put("autocommit", attempt(() -> {
                conn.setAutoCommit(autocommit);
                return conn.getAutoCommit();
            }));
            List<Object> results = new ArrayList<>();
            @SuppressWarnings("unchecked")
            List<Object> statements = (List<Object>) args.getOrDefault("statements", List.of());
            for (Object statement : statements) {
                @SuppressWarnings("unchecked")
                Map<String, Object> s = (Map<String, Object>) statement;
                Object previous = results.isEmpty() ? null : results.get(results.size() - 1);
                results.add(attempt(() -> statement(conn, s, previous)));
            }
            out.put("results", results);
            if (!autocommit) {
                out.put("commit", attempt(() -> {
                    conn.commit();
                    return "committed";
                }));
            }
        } catch (SQLException e) {
            out.put("close", error(e));
        }
        return out;
    }

    /** What DBeaver and Metabase ask of DatabaseMetaData on connect and when browsing. */
    static Map<String, Object> browse(DatabaseMetaData meta, String schema, String table) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("product", attempt(meta::getDatabaseProductName));
        out.put("productVersion", attempt(meta::getDatabaseProductVersion));
        out.put("majorVersion", attempt(meta::getDatabaseMajorVersion));
        out.put("driver", attempt(() -> meta.getDriverName() + " " + meta.getDriverVersion()));
        out.put("userName", attempt(meta::getUserName));
        out.put("identifierQuote", attempt(meta::getIdentifierQuoteString));
        out.put("catalogs", attempt(() -> rows(meta.getCatalogs())));
        out.put("schemas", attempt(() -> rows(meta.getSchemas())));
        out.put("schemasLike", attempt(() -> rows(meta.getSchemas(null, schema))));
        out.put("tableTypes", attempt(() -> rows(meta.getTableTypes())));
        out.put("tables", attempt(() -> rows(
                meta.getTables(null, null, "%", new String[] {"TABLE", "VIEW"}))));
        out.put("tablesOfSchema", attempt(() -> rows(meta.getTables(null, schema, "%", null))));
        out.put("columns", attempt(() -> rows(meta.getColumns(null, schema, table, "%"))));
        out.put("primaryKeys", attempt(() -> rows(meta.getPrimaryKeys(null, schema, table))));
        out.put("importedKeys", attempt(() -> rows(meta.getImportedKeys(null, schema, table))));
        out.put("exportedKeys", attempt(() -> rows(meta.getExportedKeys(null, schema, table))));
        out.put("indexInfo", attempt(() -> rows(meta.getIndexInfo(null, schema, table, false, true))));
        out.put("typeInfo", attempt(() -> rows(meta.getTypeInfo())));
        out.put("functions", attempt(() -> rows(meta.getFunctions(null, "pg_catalog", "upper"))));
        return out;
    }

    /** One statement's columns and rows (or update count). */
    static Map<String, Object> statement(Connection conn, Map<String, Object> s, Object previous)
            throws SQLException {
        String sql = (String) s.get("sql");
        @SuppressWarnings("unchecked")
        List<Object> params = (List<Object>) s.get("params");
        int repeat = ((Number) s.getOrDefault("repeat", 1L)).intValue();
        int maxRows = ((Number) s.getOrDefault("max_rows", 0L)).intValue();
        Map<String, Object> result = null;
        if (params == null) {
            try (Statement plain = conn.createStatement()) {
                plain.setMaxRows(maxRows);
                for (int i = 0; i < repeat; i++) {
                    result = outcome(plain, plain.execute(sql));
                }
            }
        } else {
            try (PreparedStatement prepared = conn.prepareStatement(sql)) {
                prepared.setMaxRows(maxRows);
                for (int i = 0; i < repeat; i++) {
                    for (int p = 0; p < params.size(); p++) {
                        bind(prepared, p + 1, valueOf(params.get(p), previous));
                    }
                    result = outcome(prepared, prepared.execute());
                }
            }
        }
        return result;
    }

    /**
     * A parameter's value: itself, or for {"previous": COLUMN} that column of the
     * previous statement's first row (as DBeaver binds the oid of the schema it listed).
     */
    static Object valueOf(Object param, Object previous) throws SQLException {
        if (!(param instanceof Map<?, ?> reference) || !reference.containsKey("previous")) {
            return param;
        }
        if (previous instanceof Map<?, ?> result && result.get("rows") instanceof List<?> rows
                && !rows.isEmpty()) {
            List<?> columns = (List<?>) result.get("columns");
            return ((List<?>) rows.get(0)).get(columns.indexOf(reference.get("previous")));
        }
        throw new SQLException("the previous statement has no row to take "
                + reference.get("previous") + " from");
    }

    static void bind(PreparedStatement prepared, int index, Object value) throws SQLException {
        if (value == null) {
            prepared.setNull(index, Types.VARCHAR);
        } else if (value instanceof Long n && n == n.intValue()) {
            prepared.setInt(index, n.intValue());
        } else if (value instanceof Long n) {
            prepared.setLong(index, n);
        } else if (value instanceof Integer n) {
            prepared.setInt(index, n);
        } else if (value instanceof Double d) {
            prepared.setDouble(index, d);
        } else if (value instanceof Boolean b) {
            prepared.setBoolean(index, b);
        } else if (value instanceof Map<?, ?> typed && typed.get("date") instanceof String d) {
            prepared.setDate(index, java.sql.Date.valueOf(d));
        } else if (value instanceof Map<?, ?> typed && typed.get("timestamp") instanceof String t) {
            prepared.setTimestamp(index, java.sql.Timestamp.valueOf(t));
        } else if (value instanceof Map<?, ?> typed && typed.get("decimal") instanceof String n) {
            prepared.setBigDecimal(index, new java.math.BigDecimal(n));
        } else {
            prepared.setString(index, value.toString());
        }
    }

    static Map<String, Object> outcome(Statement statement, boolean hasRows) throws SQLException {
        if (!hasRows) {
            return Map.of("updateCount", statement.getUpdateCount());
        }
        try (ResultSet rs = statement.getResultSet()) {
            ResultSetMetaData meta = rs.getMetaData();
            List<Object> columns = new ArrayList<>();
            List<Object> types = new ArrayList<>();
            for (int i = 1; i <= meta.getColumnCount(); i++) {
                columns.add(meta.getColumnLabel(i));
                types.add(meta.getColumnTypeName(i));
            }
            List<Object> rows = new ArrayList<>();
            while (rs.next()) {
                List<Object> row = new ArrayList<>();
                for (int i = 1; i <= meta.getColumnCount(); i++) {
                    row.add(cell(rs.getObject(i)));
                }
                rows.add(row);
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("columns", columns);
            out.put("types", types);
            out.put("rows", rows);
            return out;
        }
    }

    /** A metadata result set as a list of objects keyed by column label (TABLE_NAME, ...). */
    static List<Object> rows(ResultSet rs) throws SQLException {
        try (rs) {
            ResultSetMetaData meta = rs.getMetaData();
            List<Object> rows = new ArrayList<>();
            while (rs.next()) {
                Map<String, Object> row = new LinkedHashMap<>();
                for (int i = 1; i <= meta.getColumnCount(); i++) {
                    row.put(meta.getColumnLabel(i), cell(rs.getObject(i)));
                }
                rows.add(row);
            }
            return rows;
        }
    }

    /** JSON for a value: numbers, booleans and strings as themselves, anything else its text. */
    static Object cell(Object value) {
        if (value == null || value instanceof Boolean || value instanceof String) {
            return value;
        }
        if (value instanceof Number n && !(value instanceof java.math.BigDecimal)) {
            return n;
        }
        return value.toString();
    }

    static Object attempt(Call call) {
        try {
            return call.run();
        } catch (SQLException e) {
            return error(e);
        }
    }

    /** The server's message (without pgjdbc's "ERROR: " prefix) and SQLSTATE. */
    static Map<String, Object> error(SQLException e) {
        Map<String, Object> out = new LinkedHashMap<>();
        String message = e.getMessage();
        if (e instanceof PSQLException p && p.getServerErrorMessage() != null) {
            message = p.getServerErrorMessage().getMessage();
            out.put("severity", p.getServerErrorMessage().getSeverity());
        }
        out.put("error", message);
        out.put("sqlstate", e.getSQLState());
        return out;
    }

    /** The JSON writer: maps, lists, strings, numbers, booleans and null. */
    static final class Json {
        static String write(Object value) {
            StringBuilder out = new StringBuilder();
            write(value, out);
            return out.toString();
        }

        static void write(Object value, StringBuilder out) {
            if (value == null) {
                out.append("null");
            } else if (value instanceof Map<?, ?> map) {
                out.append('{');
                String separator = "";
                for (Map.Entry<?, ?> entry : map.entrySet()) {
                    out.append(separator);
                    string(entry.getKey().toString(), out);
                    out.append(':');
                    write(entry.getValue(), out);
                    separator = ",";
                }
                out.append('}');
            } else if (value instanceof List<?> list) {
                out.append('[');
                String separator = "";
                for (Object item : list) {
                    out.append(separator);
                    write(item, out);
                    separator = ",";
                }
                out.append(']');
            } else if (value instanceof Boolean) {
                out.append(value);
            } else if (value instanceof Number n && Double.isFinite(n.doubleValue())) {
                out.append(n);
            } else {
                string(value.toString(), out);
            }
        }

        static void string(String text, StringBuilder out) {
            out.append('"');
            for (char c : text.toCharArray()) {
                switch (c) {
                    case '"' -> out.append("\\\"");
                    case '\\' -> out.append("\\\\");
                    case '\n' -> out.append("\\n");
                    case '\r' -> out.append("\\r");
                    case '\t' -> out.append("\\t");
                    default -> {
                        if (c < 0x20) {
                            out.append(String.format("\\u%04x", (int) c));
                        } else {
                            out.append(c);
                        }
                    }
                }
            }
            out.append('"');
        }
    }

    /**
     * The JSON reader for the arguments (the test writes them with serde_json):
     * objects as maps, arrays as lists, integers as Long, other numbers as Double.
     */
    static final class JsonReader {
        private final String text;
        private int at = 0;

        JsonReader(String text) {
            this.text = text;
        }

        Object value() {
            skipSpace();
            char c = text.charAt(at);
            if (c == '{') {
                Map<String, Object> map = new LinkedHashMap<>();
                at++;
                while (!next('}')) {
                    next(',');
                    skipSpace();
                    String key = (String) value();
                    expect(':');
                    map.put(key, value());
                }
                return map;
            }
            if (c == '[') {
                List<Object> list = new ArrayList<>();
                at++;
                while (!next(']')) {
                    next(',');
                    list.add(value());
                }
                return list;
            }
            if (c == '"') {
                return string();
            }
            for (String word : new String[] {"true", "false", "null"}) {
                if (text.startsWith(word, at)) {
                    at += word.length();
                    return word.equals("null") ? null : Boolean.valueOf(word);
                }
            }
            int start = at;
            while (at < text.length() && "+-0123456789.eE".indexOf(text.charAt(at)) >= 0) {
                at++;
            }
            String number = text.substring(start, at);
            if (number.isEmpty()) {
                throw new IllegalArgumentException("not JSON at " + start + ": " + text);
            }
            return number.matches("-?\\d+") ? (Object) Long.valueOf(number) : Double.valueOf(number);
        }

        private String string() {
            StringBuilder out = new StringBuilder();
            at++;
            while (text.charAt(at) != '"') {
                char c = text.charAt(at++);
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                char escaped = text.charAt(at++);
                switch (escaped) {
                    case 'n' -> out.append('\n');
                    case 'r' -> out.append('\r');
                    case 't' -> out.append('\t');
                    case 'b' -> out.append('\b');
                    case 'f' -> out.append('\f');
                    case 'u' -> {
                        out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
                        at += 4;
                    }
                    default -> out.append(escaped);
                }
            }
            at++;
            return out.toString();
        }

        /** Whether `c` comes next (then consumed). */
        private boolean next(char c) {
            skipSpace();
            if (at < text.length() && text.charAt(at) == c) {
                at++;
                return true;
            }
            return false;
        }

        private void expect(char c) {
            if (!next(c)) {
                throw new IllegalArgumentException("expected '" + c + "' at " + at + ": " + text);
            }
        }

        private void skipSpace() {
            while (at < text.length() && Character.isWhitespace(text.charAt(at))) {
                at++;
            }
        }
    }
}
