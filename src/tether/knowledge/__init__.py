"""Knowledge: documents chunked with their offsets, indexed into a memory, searched and graded.

``KnowledgeBase(memory)`` ingests text, Markdown, HTML and PDF (``tether[knowledge]``);
``Retriever`` runs the retrieval sub-loop (retrieve, grade each passage, rewrite the query
when most miss), whose relevant passages are what an answer may cite;
``Agent(knowledge=kb)`` runs it inside a run, as the control tool ``search_knowledge``
(``Knowledge``).
"""

from tether.knowledge.base import KnowledgeBase, Passage
from tether.knowledge.chunking import Chunk, chunk_text
from tether.knowledge.config import DISCLAIMER, Knowledge, cited_labels
from tether.knowledge.documents import Document, html_text, read_document
from tether.knowledge.retrieval import Grade, Retrieval, Retriever, Round, Searchable

__all__ = [
    "DISCLAIMER",
    "Chunk",
    "Document",
    "Grade",
    "Knowledge",
    "KnowledgeBase",
    "Passage",
    "Retrieval",
    "Retriever",
    "Round",
    "Searchable",
    "chunk_text",
    "cited_labels",
    "html_text",
    "read_document",
]
